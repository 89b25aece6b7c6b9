package guestproto

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// ErrGuestGone means the guest stopped answering: the sandbox died or the connection broke.
var ErrGuestGone = fmt.Errorf("sandbox guest is gone: %w", errdefs.ErrUnavailable)

// maxErrorMessage caps an error message the guest sends before it reaches a user.
const maxErrorMessage = 2048

// Client is the server's side of the protocol over one sandbox's byte stream.
// It is safe for concurrent use; each call is its own stream.
type Client struct {
	sess   *yamux.Session
	hello  Hello
	egress atomic.Pointer[egressHandler] // streams the guest opens go here (ServeEgress)
	// MaxExecutionBytes caps what one Execute or Command may read from the guest in all,
	// whatever the guest claims its own caps are.
	MaxExecutionBytes int64
	// Slack is added to an execution's timeout before the client stops waiting for a guest
	// that does not answer.
	Slack time.Duration
}

// YamuxConfig is the multiplexer configuration both sides use.
func YamuxConfig() *yamux.Config {
	cfg := yamux.DefaultConfig()
	cfg.EnableKeepAlive = false // a dead guest closes its stdout; no pings needed
	cfg.LogOutput = io.Discard
	cfg.MaxStreamWindowSize = 1 << 20
	cfg.AcceptBacklog = 64
	return cfg
}

// Dial starts the multiplexer over conn and checks the guest's protocol version.
// conn is closed by Close.
func Dial(ctx context.Context, conn io.ReadWriteCloser) (*Client, error) {
	sess, err := yamux.Client(conn, YamuxConfig())
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("start guest multiplexer: %w", err)
	}
	c := &Client{sess: sess, MaxExecutionBytes: 128 << 20, Slack: 30 * time.Second}
	go c.accept()
	var m Message
	if err := c.roundTrip(ctx, Request{Op: OpHello, Version: Version}, &m); err != nil {
		sess.Close()
		return nil, fmt.Errorf("guest hello: %w", err)
	}
	if m.Hello == nil {
		sess.Close()
		return nil, fmt.Errorf("guest hello: no hello in answer: %w", errdefs.ErrUnavailable)
	}
	if m.Hello.Version < MinVersion || m.Hello.Version > Version {
		sess.Close()
		return nil, fmt.Errorf("guest speaks protocol version %d, server needs %d to %d: %w",
			m.Hello.Version, MinVersion, Version, errdefs.ErrUnavailable)
	}
	c.hello = *m.Hello
	return c, nil
}

// egressHello bounds how long the guest has to name a stream it opened.
const egressHello = 10 * time.Second

// egressHandler is what ServeEgress set.
type egressHandler struct {
	serve func(net.Conn)
	max   int64
}

// accept takes the streams the guest opens: egress connections go to the handler
// ServeEgress set, while the connection has fewer than its max streams (of either side,
// and those half-closed that yamux keeps, with up to a window of unread bytes each, until
// the guest closes them too or StreamCloseTimeout); anything else, any stream past the
// max, or any stream while there is no handler, is closed at once: a hostile guest cannot
// pile up goroutines and buffers here.
func (c *Client) accept() {
	for {
		s, err := c.sess.AcceptStream()
		if err != nil {
			return
		}
		h := c.egress.Load()
		if h == nil || int64(c.sess.NumStreams()) > h.max {
			s.Close()
			continue
		}
		go func() {
			defer s.Close()
			s.SetReadDeadline(time.Now().Add(egressHello))
			var req Request
			// Read the line byte by byte: what follows it is the connection's, unbuffered.
			line, err := readLineUnbuffered(s, 256)
			if err != nil || json.Unmarshal(line, &req) != nil || req.Op != OpEgress {
				s.Close()
				return
			}
			s.SetReadDeadline(time.Time{})
			h := c.egress.Load()
			if h == nil {
				return
			}
			h.serve(s)
		}()
	}
}

// readLineUnbuffered reads one line of at most max bytes, reading nothing past it.
func readLineUnbuffered(r io.Reader, max int) ([]byte, error) {
	var line []byte
	var b [1]byte
	for len(line) < max {
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, err
		}
		if b[0] == '\n' {
			return line, nil
		}
		line = append(line, b[0])
	}
	return nil, ErrMessageTooLarge
}

// ServeEgress hands each egress connection the guest opens (see OpEgress) to h, while the
// connection has at most max streams (those past it are closed as they come). The connection is a yamux
// stream, whose Close is a half-close: h returning closes it whole. nil: refuse them.
func (c *Client) ServeEgress(h func(net.Conn), max int) {
	if h == nil {
		c.egress.Store(nil)
		return
	}
	c.egress.Store(&egressHandler{serve: h, max: int64(max)})
}

// Trust makes code in the sandbox trust the certificate authority ca (PEM; "": none).
func (c *Client) Trust(ctx context.Context, ca string) error {
	var m Message
	if err := c.roundTrip(ctx, Request{Op: OpTrust, CA: ca}, &m); err != nil {
		return fmt.Errorf("install the session's certificate authority: %w", err)
	}
	if !m.OK {
		return fmt.Errorf("install the session's certificate authority: unexpected answer: %w", errdefs.ErrUnavailable)
	}
	return nil
}

// Checkpoint readies the guest for a checkpoint of its sandbox (see OpCheckpoint): it returns
// once the guest has closed the connection, which ends c.
func (c *Client) Checkpoint(ctx context.Context) error {
	var m Message
	if err := c.roundTrip(ctx, Request{Op: OpCheckpoint}, &m); err != nil {
		return fmt.Errorf("ready the guest for a checkpoint: %w", err)
	}
	if !m.OK {
		return fmt.Errorf("ready the guest for a checkpoint: unexpected answer: %w", errdefs.ErrUnavailable)
	}
	select {
	case <-c.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ready the guest for a checkpoint: it did not close the connection: %w", ctx.Err())
	}
}

// Hello returns what the guest said when it was dialed.
func (c *Client) Hello() Hello { return c.hello }

// Supports says whether the guest speaks version v of the protocol (one of the Version*
// constants) or later.
func (c *Client) Supports(v int) bool { return c.hello.Version >= v }

// Close ends the multiplexer and closes the underlying connection.
func (c *Client) Close() error { return c.sess.Close() }

// Done is closed when the connection to the guest is gone.
func (c *Client) Done() <-chan struct{} { return c.sess.CloseChan() }

// call opens a stream and writes req. The stream's deadline follows ctx.
func (c *Client) call(ctx context.Context, req Request) (*yamux.Stream, *bufio.Reader, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, nil, err
	}
	s, err := c.sess.OpenStream()
	if err != nil {
		return nil, nil, nil, ErrGuestGone
	}
	stop := context.AfterFunc(ctx, func() { s.SetDeadline(time.Unix(1, 0)) })
	// The stream's close waits until its frame is written (yamux hands it to its writer):
	// done closes it beside the caller's answer rather than before it.
	done := func() { stop(); go s.Close() }
	if err := WriteJSON(s, req); err != nil {
		done()
		return nil, nil, nil, c.streamErr(ctx, err)
	}
	// A small reader: most answers are a line or two, and each call allocates its own (64
	// KiB a call was most of what a trivial cell allocated on the server). A longer line
	// is read in pieces (ReadLine); a download's bytes bypass it.
	return s, bufio.NewReaderSize(s, 4<<10), done, nil
}

// streamErr turns a stream failure into the error the caller should see.
func (c *Client) streamErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, ErrMessageTooLarge) {
		return fmt.Errorf("guest sent an oversized message: %w", errdefs.ErrUnavailable)
	}
	if c.sess.IsClosed() || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return ErrGuestGone
	}
	return fmt.Errorf("guest stream: %w: %w", err, errdefs.ErrUnavailable)
}

// final reads messages until the final one, passing outputs to onOutput (nil: none
// expected) and a tool set to onTools (nil: none expected), and returns the final message.
// It stops after budget bytes.
func (c *Client) final(ctx context.Context, br *bufio.Reader, budget int64, onInput func(*InputRequest) error, onOutput func(api.Output), onTools func(*ToolSet) error) (*Message, error) {
	for {
		line, err := ReadLine(br, MaxMessageSize)
		if err != nil {
			return nil, c.streamErr(ctx, err)
		}
		budget -= int64(len(line))
		if budget < 0 {
			return nil, fmt.Errorf("guest sent more than %d bytes for one call: %w", c.MaxExecutionBytes, errdefs.ErrUnavailable)
		}
		var m Message
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, fmt.Errorf("decode guest message: %w: %w", err, errdefs.ErrUnavailable)
		}
		if m.Output != nil {
			if onOutput == nil {
				return nil, fmt.Errorf("guest sent an output where none belongs: %w", errdefs.ErrUnavailable)
			}
			onOutput(*m.Output)
			continue
		}
		if m.Input != nil {
			if onInput == nil {
				return nil, fmt.Errorf("guest asked for input where none belongs: %w", errdefs.ErrUnavailable)
			}
			if err := onInput(m.Input); err != nil {
				return nil, err
			}
			continue
		}
		if m.Tools != nil {
			if onTools == nil {
				return nil, fmt.Errorf("guest sent tools where none belong: %w", errdefs.ErrUnavailable)
			}
			if err := onTools(m.Tools); err != nil {
				return nil, err
			}
			continue
		}
		if m.Error != nil {
			msg := m.Error.Message
			if len(msg) > maxErrorMessage {
				msg = msg[:maxErrorMessage] + "..."
			}
			return nil, errdefs.New(m.Error.Code, msg)
		}
		return &m, nil
	}
}

// roundTrip sends req and decodes the final message into m.
func (c *Client) roundTrip(ctx context.Context, req Request, m *Message) error {
	_, br, done, err := c.call(ctx, req)
	if err != nil {
		return err
	}
	defer done()
	got, err := c.final(ctx, br, MaxMessageSize, nil, nil, nil)
	if err != nil {
		return err
	}
	*m = *got
	return nil
}

// Configure sends the sandbox's configuration and starts its kernel; it returns when the
// kernel is ready (pre-imports done).
func (c *Client) Configure(ctx context.Context, cfg Config) error {
	var m Message
	if err := c.roundTrip(ctx, Request{Op: OpConfigure, Config: &cfg}, &m); err != nil {
		return fmt.Errorf("configure guest: %w", err)
	}
	if !m.OK {
		return fmt.Errorf("configure guest: unexpected answer: %w", errdefs.ErrUnavailable)
	}
	return nil
}

// newRunID names one run (a cell or a command) for the guest.
func newRunID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// runContext is the context of a run's stream: it outlives ctx (ending ctx means interrupt,
// not abandon) and ends after wait, bounding how long a silent guest is waited for. When
// ctx ends, the guest is told to interrupt run id: it stops the run if it is going, or as
// soon as it arrives if the interrupt overtook it. stop cleans up.
func (c *Client) runContext(ctx context.Context, id string, wait time.Duration) (sctx context.Context, stop func()) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
	stopInterrupt := context.AfterFunc(ctx, func() {
		ictx, icancel := context.WithTimeout(sctx, 5*time.Second)
		defer icancel()
		c.InterruptRun(ictx, id)
	})
	return sctx, func() {
		stopInterrupt()
		cancel()
	}
}

// Execute runs code in the kernel. Outputs are passed to onOutput as they arrive (from the
// calling goroutine) and also collected in the result. If ctx ends, before the cell began
// or while it runs, the cell is interrupted and Execute still waits for its result (status
// interrupted), so the kernel is idle on return. req.TimeoutS must be set: it bounds how
// long the client waits for a silent guest. The kernel's tools, if the cell changed them,
// are not returned: ExecuteWith returns them.
func (c *Client) Execute(ctx context.Context, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	return c.ExecuteWith(ctx, req, ExecuteOptions{OnOutput: onOutput})
}

// ExecuteRun is Execute with the run's id chosen by the caller, for InterruptRun.
func (c *Client) ExecuteRun(ctx context.Context, id string, req api.ExecuteRequest, onOutput func(api.Output)) (*api.ExecuteResult, error) {
	return c.ExecuteWith(ctx, req, ExecuteOptions{RunID: id, OnOutput: onOutput})
}

// ExecuteOptions are Execute's options beyond the request.
type ExecuteOptions struct {
	// RunID names the run for InterruptRun; "": a new id.
	RunID string
	// Quiet runs the code as the server's (Request.Quiet): a tool's call or load.
	Quiet bool
	// OnOutput gets each output as it arrives, from the calling goroutine; nil: none.
	OnOutput func(api.Output)
	// OnTools gets the kernel's tools, all of them, when the run changed them: once at
	// most, from the calling goroutine, before ExecuteWith returns; checked (ToolSet.Check).
	// nil: they are dropped.
	OnTools func(ToolSet)
	// OnInput, when set, answers the cell's input() and getpass() (Request.Stdin): called
	// from a goroutine of its own, one at a time, with a context that ends when the run
	// does. Its error is the cell's EOFError. nil: they fail at once in the cell.
	OnInput func(ctx context.Context, prompt string, password bool) (string, error)
	// Trace, when set, gets where the run's time went once it has its result: Call always,
	// the guest's spans from a guest that Supports VersionTrace.
	Trace *Trace
}

// ExecuteWith is Execute with options: a run id, a quiet run, the tools the run changed.
func (c *Client) ExecuteWith(ctx context.Context, req api.ExecuteRequest, opts ExecuteOptions) (*api.ExecuteResult, error) {
	if req.Language != "" && req.Language != api.LanguagePython && !c.Supports(VersionLanguages) {
		// An older guest would run the code as Python.
		return nil, fmt.Errorf("this session's sandbox runs an older guest, which runs only Python; a new session runs %s: %w",
			req.Language, errdefs.ErrFailedPrecondition)
	}
	id := opts.RunID
	if id == "" {
		id = newRunID()
	}
	wait := time.Duration(req.TimeoutS*float64(time.Second)) + c.Slack
	sctx, stop := c.runContext(ctx, id, wait)
	defer stop()
	trace := opts.Trace != nil && c.Supports(VersionTrace)
	start := time.Now()
	// A run without history is a quiet one to the guest: not counted, not in In and Out.
	st, br, done, err := c.call(sctx, Request{Op: OpExecute, RunID: id, Execute: &req, Quiet: opts.Quiet || req.NoHistory,
		Stdin: opts.OnInput != nil, Trace: trace})
	if err != nil {
		return nil, err
	}
	defer done()
	var onInput func(*InputRequest) error
	if opts.OnInput != nil {
		ictx, cancel := context.WithCancel(ctx)
		defer cancel()
		var asking atomic.Bool
		onInput = func(in *InputRequest) error {
			if len(in.Prompt) > MaxInput || !asking.CompareAndSwap(false, true) {
				return fmt.Errorf("guest asked for input out of turn: %w", errdefs.ErrUnavailable)
			}
			go func() {
				v, err := opts.OnInput(ictx, in.Prompt, in.Password)
				rep := InputReply{Value: v}
				if err != nil {
					rep = InputReply{Error: err.Error()}
				}
				asking.Store(false)
				// The guest reads a line of at most MaxInput bytes, the value as JSON
				// writes it (a control character is six bytes there).
				line, err := jsonLine(rep)
				if err != nil || len(line) > MaxInput {
					line, _ = jsonLine(InputReply{Error: fmt.Sprintf("the value is longer than this server takes (%d bytes as JSON)", MaxInput-64)})
				}
				st.Write(line)
			}()
			return nil
		}
	}
	var outputs []api.Output
	var tools *ToolSet
	m, err := c.final(sctx, br, c.MaxExecutionBytes, onInput, func(o api.Output) {
		outputs = append(outputs, o)
		if opts.OnOutput != nil {
			opts.OnOutput(o)
		}
	}, func(ts *ToolSet) error {
		if tools != nil {
			return fmt.Errorf("guest sent tools twice for one run: %w", errdefs.ErrUnavailable)
		}
		if err := ts.Check(); err != nil {
			return fmt.Errorf("guest sent invalid tools: %s: %w", err.Error(), errdefs.ErrUnavailable)
		}
		if ts.Tools == nil {
			ts.Tools = []Tool{}
		}
		tools = ts
		return nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("guest gave no result within %s: %w", wait, errdefs.ErrUnavailable)
		}
		return nil, err
	}
	if m.Result == nil {
		return nil, fmt.Errorf("guest answered execute without a result: %w", errdefs.ErrUnavailable)
	}
	if opts.Trace != nil {
		t := Trace{}
		if trace && m.Trace != nil {
			t = *m.Trace
		}
		t.Call = time.Since(start)
		t.fit()
		*opts.Trace = t
	}
	r := m.Result
	if !validStatus(r.Status) {
		return nil, fmt.Errorf("guest reported unknown status %q: %w", r.Status, errdefs.ErrUnavailable)
	}
	for k, o := range r.UserExpressions {
		if _, asked := req.UserExpressions[k]; !asked || (o.Type != api.OutputDisplayData && o.Type != api.OutputError) {
			return nil, fmt.Errorf("guest answered a user expression that was not asked, or not as an output: %w", errdefs.ErrUnavailable)
		}
	}
	r.Outputs = outputs
	if r.Outputs == nil {
		r.Outputs = []api.Output{}
	}
	if r.Files == nil {
		r.Files = []api.FileChange{}
	}
	if tools != nil && opts.OnTools != nil {
		opts.OnTools(*tools)
	}
	return r, nil
}

func validStatus(s string) bool {
	switch s {
	case api.StatusOK, api.StatusError, api.StatusTimeout, api.StatusInterrupted, api.StatusOOM, api.StatusCrashed:
		return true
	}
	return false
}

// Interrupt stops the running cell, if any. The cell's Execute returns with status
// interrupted; if the kernel ignored the interrupt and had to be killed and restarted, the
// result's Message says so.
func (c *Client) Interrupt(ctx context.Context) error {
	return c.InterruptRun(ctx, "")
}

// InterruptRun stops run id: now if it runs, else as soon as it arrives ("": the running
// cell).
func (c *Client) InterruptRun(ctx context.Context, id string) error {
	var m Message
	return c.roundTrip(ctx, Request{Op: OpInterrupt, RunID: id}, &m)
}

// Restart replaces the kernel with a fresh one; workspace files stay.
func (c *Client) Restart(ctx context.Context) error {
	var m Message
	return c.roundTrip(ctx, Request{Op: OpRestart}, &m)
}

// Command runs a program in the sandbox. If ctx ends, before the program started or while
// it runs, the guest kills it and everything it started, and Command still returns the
// result (status interrupted). req.TimeoutS must be set.
func (c *Client) Command(ctx context.Context, req api.CommandRequest) (*api.CommandResult, error) {
	return c.CommandRun(ctx, newRunID(), "", req, nil)
}

// CommandRun is Command with the run's id chosen by the caller, for InterruptRun. dir, when
// set, is the folder the program starts in: absolute in the sandbox, entered as the
// sandbox's user, perhaps outside the workspace (Request.Dir); req.Cwd must then be "". With
// onOutput, the guest streams the program's stdout and stderr: each chunk goes to onOutput
// (from the calling goroutine) as it is read, as an api.OutputStream output named "stdout"
// or "stderr", and the result's Stdout and Stderr stay empty.
func (c *Client) CommandRun(ctx context.Context, id, dir string, req api.CommandRequest, onOutput func(api.Output)) (*api.CommandResult, error) {
	wait := time.Duration(req.TimeoutS*float64(time.Second)) + c.Slack
	sctx, stop := c.runContext(ctx, id, wait)
	defer stop()
	_, br, done, err := c.call(sctx, Request{Op: OpCommand, RunID: id, Command: &req, Dir: dir, Stream: onOutput != nil})
	if err != nil {
		return nil, err
	}
	defer done()
	var bad bool
	var each func(api.Output)
	if onOutput != nil {
		each = func(o api.Output) {
			if o.Type != api.OutputStream || (o.Name != "stdout" && o.Name != "stderr") {
				bad = true
				return
			}
			if !bad {
				onOutput(o)
			}
		}
	}
	m, err := c.final(sctx, br, c.MaxExecutionBytes, nil, each, nil)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("guest gave no result within %s: %w", wait, errdefs.ErrUnavailable)
		}
		return nil, err
	}
	if bad {
		return nil, fmt.Errorf("guest sent a command output that is not stdout or stderr text: %w", errdefs.ErrUnavailable)
	}
	if m.CommandResult == nil || !validStatus(m.CommandResult.Status) {
		return nil, fmt.Errorf("guest answered command without a valid result: %w", errdefs.ErrUnavailable)
	}
	if m.CommandResult.Files == nil {
		m.CommandResult.Files = []api.FileChange{}
	}
	return m.CommandResult, nil
}

// DeleteContext drops a named execution context of the kernel: its variables and working
// directory. It fails with errdefs.ErrNotFound when the kernel has no such context.
func (c *Client) DeleteContext(ctx context.Context, name string) error {
	var m Message
	return c.roundTrip(ctx, Request{Op: OpDeleteContext, Context: name}, &m)
}

// PutFile writes r to a workspace path, creating parent folders, replacing a file there.
// The body travels in ChunkWriter framing; the file appears only if all of it arrived.
// An error reading r is returned as it is (e.g. a body over the server's size cap).
func (c *Client) PutFile(ctx context.Context, path string, r io.Reader) (*api.FileInfo, error) {
	s, br, done, err := c.call(ctx, Request{Op: OpPutFile, Path: path})
	if err != nil {
		return nil, err
	}
	defer done()
	cw := ChunkWriter{W: s}
	if _, err := io.Copy(cw, readOnly{r}); err != nil {
		// Leaving without the end chunk makes the guest discard what it got.
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var rerr readErr
		if errors.As(err, &rerr) {
			return nil, rerr.err
		}
		// The guest may have answered already (a bad path, a full disk): prefer its reason.
		if _, ferr := c.final(ctx, br, MaxMessageSize, nil, nil, nil); ferr != nil && !errors.Is(ferr, ErrGuestGone) {
			return nil, ferr
		}
		return nil, c.streamErr(ctx, err)
	}
	if err := cw.Close(); err != nil {
		return nil, c.streamErr(ctx, err)
	}
	m, err := c.final(ctx, br, MaxMessageSize, nil, nil, nil)
	if err != nil {
		return nil, err
	}
	if m.File == nil {
		return nil, fmt.Errorf("guest answered upload without file info: %w", errdefs.ErrUnavailable)
	}
	return m.File, nil
}

// readOnly marks errors of the source reader so PutFile can tell them from stream errors.
type readOnly struct{ r io.Reader }

type readErr struct{ err error }

func (e readErr) Error() string { return e.err.Error() }

func (r readOnly) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = readErr{err}
	}
	return n, err
}

// GetFile opens a workspace file for reading. The caller must close the reader; it yields
// exactly info.Size bytes or fails with io.ErrUnexpectedEOF.
func (c *Client) GetFile(ctx context.Context, path string) (*api.FileInfo, io.ReadCloser, error) {
	_, br, done, err := c.call(ctx, Request{Op: OpGetFile, Path: path})
	if err != nil {
		return nil, nil, err
	}
	m, err := c.final(ctx, br, MaxMessageSize, nil, nil, nil)
	if err != nil {
		done()
		return nil, nil, err
	}
	if m.File == nil || m.File.Size < 0 {
		done()
		return nil, nil, fmt.Errorf("guest answered download without file info: %w", errdefs.ErrUnavailable)
	}
	return m.File, &sizedReader{r: br, left: m.File.Size, done: done}, nil
}

type sizedReader struct {
	r    io.Reader
	left int64
	done func()
}

func (s *sizedReader) Read(p []byte) (int, error) {
	if s.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > s.left {
		p = p[:s.left]
	}
	n, err := s.r.Read(p)
	s.left -= int64(n)
	if err == io.EOF && s.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err == nil && s.left == 0 {
		err = io.EOF
	}
	return n, err
}

func (s *sizedReader) Close() error { s.done(); return nil }

// ListFiles lists a workspace folder ("" or "." is the workspace itself).
func (c *Client) ListFiles(ctx context.Context, path string) (*api.FileList, error) {
	var m Message
	if err := c.roundTrip(ctx, Request{Op: OpListFiles, Path: path}, &m); err != nil {
		return nil, err
	}
	if m.Listing == nil {
		return nil, fmt.Errorf("guest answered list without a listing: %w", errdefs.ErrUnavailable)
	}
	if m.Listing.Files == nil {
		m.Listing.Files = []api.FileInfo{}
	}
	return m.Listing, nil
}

// DeleteFile removes a workspace file, or an empty folder.
func (c *Client) DeleteFile(ctx context.Context, path string) error {
	var m Message
	return c.roundTrip(ctx, Request{Op: OpDeleteFile, Path: path}, &m)
}

// MakeDir makes a workspace folder and its missing parents, like mkdir -p. The entry's
// Created says whether this call made it; a path that exists as anything but a folder
// fails with errdefs.ErrFailedPrecondition.
func (c *Client) MakeDir(ctx context.Context, path string) (*Entry, error) {
	return c.entry(ctx, Request{Op: OpMakeDir, Path: path})
}

// Move renames workspace path from to to: a file, a symbolic link (itself) or a folder,
// making to's missing parents. Like rename(2) (and mv -T), it replaces a file at to, or an
// empty folder when from is a folder. It answers to's entry.
func (c *Client) Move(ctx context.Context, from, to string) (*Entry, error) {
	return c.entry(ctx, Request{Op: OpMove, Path: from, To: to})
}

// Remove removes a workspace file, symbolic link (never what it points to) or folder with
// everything in it. A path that does not exist fails with errdefs.ErrNotFound.
func (c *Client) Remove(ctx context.Context, path string) error {
	var m Message
	return c.roundTrip(ctx, Request{Op: OpRemove, Path: path}, &m)
}

// Stat describes one workspace entry; a symbolic link is described, not followed.
func (c *Client) Stat(ctx context.Context, path string) (*Entry, error) {
	return c.entry(ctx, Request{Op: OpStat, Path: path})
}

// entry sends req and checks the Entry it answers.
func (c *Client) entry(ctx context.Context, req Request) (*Entry, error) {
	var m Message
	if err := c.roundTrip(ctx, req, &m); err != nil {
		return nil, err
	}
	e := m.Entry
	if e == nil || e.Size < 0 || e.Mode&^0o7777 != 0 || len(e.Target) > 4096 /* PATH_MAX */ {
		return nil, fmt.Errorf("guest answered %s without a valid entry: %w", req.Op, errdefs.ErrUnavailable)
	}
	switch e.Type {
	case "file", "dir", "symlink", "other":
	default:
		return nil, fmt.Errorf("guest reported unknown file type %q: %w", e.Type, errdefs.ErrUnavailable)
	}
	return e, nil
}
