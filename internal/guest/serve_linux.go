package guest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/yamux"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guest/pyrunner"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// Defaults for Config fields left at zero.
const (
	defaultMaxOutput = 1 << 20
	defaultMaxRich   = 16 << 20
	defaultTimeout   = 60 * time.Second
	defaultGrace     = 3 * time.Second
	// startTimeout bounds a kernel's start and its preimport.
	startTimeout = 120 * time.Second
)

// testHookServe, when set by a test, sees every server Serve creates.
var testHookServe func(*server)

type server struct {
	opts   Options
	log    *slog.Logger
	root   *root
	tmp    string              // private folder for IPYTHONDIR and MPLCONFIGDIR
	user   *syscall.Credential // what user code runs as; nil: the guest's own uid
	oom    oomCounter
	watch  context.CancelFunc // stops the memory watch (nil: none)
	procFD bool               // /proc/self/fd works: a command's cwd is passed as its open descriptor

	calls sync.WaitGroup                     // handlers of calls, on every connection
	busy  atomic.Bool                        // a cell is running: a second Execute is refused
	runs  *runs                              // cells and commands by run id, for interrupts
	cell  atomic.Pointer[context.CancelFunc] // interrupts the running cell (an Interrupt without run id)
	kmu   sync.Mutex                         // held while the kernel runs a cell or is replaced
	count atomic.Int64                       // the kernel's execution count after its latest cell
	ctxs  map[string]bool                    // the kernel's named execution contexts; guarded by kmu

	// checkpoint closes the listener for a checkpoint (Listen sets it); nil: the guest
	// serves on stdio and cannot be checkpointed.
	checkpoint   func()
	madeDumpable bool // the checkpoint made the guest dumpable (listen_linux.go); guarded by Listen's lock

	mux      atomic.Pointer[yamux.Session] // the attached connection, for egress streams
	egressLn net.Listener                  // the egress proxy's; nil: none (egress_linux.go)

	mu      sync.Mutex // guards what follows
	cfg     *guestproto.Config
	kernel  *kernel
	langs   map[langKey]*langKernel // kernels of other languages; changed under kmu too
	gen     int                     // bumped on every kernel start
	cmds    map[int]bool            // process groups of running commands
	closing bool
}

// Serve serves the guest protocol on conn until conn ends or ctx is done, then kills the
// kernel and every command it started. It returns nil then; an error only if it could not
// start (e.g. the workspace folder is missing).
func Serve(ctx context.Context, conn io.ReadWriteCloser, opts Options) error {
	s, err := newServer(opts)
	if err != nil {
		conn.Close()
		return err
	}
	s.serveConn(ctx, conn)
	s.close() // kills what runs, then waits for the calls, with a bound
	return nil
}

// newServer prepares the guest's state: the workspace root, the kernel's private folder.
func newServer(opts Options) (*server, error) {
	if opts.Workspace == "" {
		opts.Workspace = api.WorkspaceDir
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	procs() // the reaper must run before the first child starts
	if opts.Init {
		if err := initMode(); err != nil {
			log.Warn("cannot become a child subreaper", "error", err)
		}
	}
	var user *syscall.Credential
	if opts.UserUID > 0 && opts.UserUID != os.Getuid() {
		user = &syscall.Credential{Uid: uint32(opts.UserUID), Gid: uint32(opts.UserGID), Groups: []uint32{}}
	}
	r, err := openRoot(opts.Workspace, user)
	if err != nil {
		return nil, fmt.Errorf("open workspace %s: %w", opts.Workspace, err)
	}
	if !opts.Init {
		opts.Template = "" // a forked kernel becomes the guest's child only when it is process 1
	}
	tmpDir := "" // a new folder in the temporary folder, which may be the host's
	if opts.Template != "" {
		// A sandbox's guest, whose /tmp is its own: the path a template's kernels have.
		tmpDir = pyrunner.KernelTmp
	}
	tmp, err := userTemp(tmpDir, opts.MplCache, user)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("create the guest's temporary folder: %w", err)
	}
	_, procErr := os.Stat("/proc/self/fd")
	s := &server{opts: opts, log: log, root: r, tmp: tmp, user: user, oom: newOOMCounter(opts.Cgroup),
		procFD: procErr == nil, cmds: map[int]bool{}, runs: newRuns()}
	var pids *userPids
	if opts.Pids > 0 {
		// Fails closed: without it user code would have no process limit.
		if pids, err = newUserPids(CgroupMount, "/proc/self/cgroup", opts.Pids, log); err != nil {
			r.close()
			os.RemoveAll(tmp)
			return nil, err
		}
		procs().startIn(pids)
	}
	if w := newMemWatch(opts.MemoryMB, log); w != nil {
		w.pids = pids
		ctx, cancel := context.WithCancel(context.Background())
		s.oom.watch, s.watch = w, cancel
		go w.run(ctx)
	}
	if opts.Egress != "" {
		if err := s.startEgress(opts.Egress); err != nil {
			if s.watch != nil {
				s.watch()
			}
			r.close()
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("start the egress proxy on %s: %w", opts.Egress, err)
		}
	}
	if testHookServe != nil {
		testHookServe(s)
	}
	return s, nil
}

// serveConn serves one connection until it ends or ctx is done. A call's stream ending ends
// its run, so a cell running when the connection drops is interrupted; the kernel and its
// state stay. The returned channel is closed when the connection's calls have returned.
func (s *server) serveConn(ctx context.Context, conn io.ReadWriteCloser) <-chan struct{} {
	done := make(chan struct{})
	sess, err := yamux.Server(conn, guestproto.YamuxConfig())
	if err != nil {
		conn.Close()
		s.log.Warn("start the guest multiplexer", "error", err)
		close(done)
		return done
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	s.setMux(sess)
	defer s.clearMux(sess)
	var calls sync.WaitGroup
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			break
		}
		s.calls.Add(1)
		calls.Add(1)
		go func() {
			defer s.calls.Done()
			defer calls.Done()
			s.handle(ctx, st)
		}()
	}
	cancel()
	sess.Close()
	go func() {
		calls.Wait()
		close(done)
	}()
	return done
}

// close kills the kernel and every command, and releases the workspace once the calls
// have returned.
func (s *server) close() {
	if s.watch != nil {
		s.watch()
	}
	if s.egressLn != nil {
		s.egressLn.Close()
	}
	s.shutdown()
	done := make(chan struct{})
	go func() { s.calls.Wait(); close(done) }()
	select {
	case <-done:
		s.root.close()
		os.RemoveAll(s.tmp)
	case <-time.After(10 * time.Second):
		// A call still holds the root descriptor: leave it open rather than let its number
		// be reused under that call.
		s.log.Warn("guest calls still running at shutdown")
	}
}

// userTemp makes the kernel's private folder, dir or a new folder in the host's temporary
// folder when dir is "" (IPYTHONDIR and MPLCONFIGDIR in it, the latter seeded from mplCache)
// and gives it to user, when set: the kernel runs as user.
func userTemp(dir, mplCache string, user *syscall.Credential) (string, error) {
	tmp := dir
	var err error
	if dir == "" {
		tmp, err = os.MkdirTemp("", "cellbox-guest-")
	} else {
		err = os.Mkdir(dir, 0o700)
	}
	if err != nil {
		return "", err
	}
	paths := []string{tmp, filepath.Join(tmp, "ipython"), filepath.Join(tmp, "matplotlib")}
	os.Mkdir(paths[1], 0o700)
	os.Mkdir(paths[2], 0o700)
	if mplCache != "" {
		paths = append(paths, seedDir(mplCache, paths[2])...)
	}
	if user != nil {
		for _, p := range paths {
			if err := os.Lchown(p, int(user.Uid), int(user.Gid)); err != nil {
				os.RemoveAll(tmp)
				return "", err
			}
		}
	}
	return tmp, nil
}

// seedDir copies the regular files of src into dst (best effort) and returns their paths.
func seedDir(src, dst string) []string {
	entries, err := os.ReadDir(src)
	if err != nil {
		return nil
	}
	var made []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		p := filepath.Join(dst, e.Name())
		if err == nil && os.WriteFile(p, b, 0o600) == nil {
			made = append(made, p)
		}
	}
	return made
}

// shutdown kills the kernel and every running command.
func (s *server) shutdown() {
	s.mu.Lock()
	s.closing = true
	k := s.kernel
	langs := s.langs
	s.langs = nil
	cmds := make([]int, 0, len(s.cmds))
	for pid := range s.cmds {
		cmds = append(cmds, pid)
	}
	s.mu.Unlock()
	for _, pid := range cmds {
		killTree(pid, true)
	}
	if k != nil {
		k.kill()
	}
	for _, lk := range langs {
		lk.k.kill()
	}
}

func (s *server) handle(ctx context.Context, st *yamux.Stream) {
	start := time.Now() // an execute's trace (Request.Trace) starts here
	defer st.Close()
	// A small reader: a request is one short line but for an upload's body, and each call
	// allocates its own. The guest's heap goal is small (tuneMemory), so 64 KiB a call
	// made a GC cycle every few cells, and a cycle costs much more under gVisor.
	br := bufio.NewReaderSize(st, 4<<10)
	var req guestproto.Request
	if err := guestproto.ReadJSON(br, guestproto.MaxMessageSize, &req); err != nil {
		writeMsg(st, errMsg(api.CodeInvalidArgument, "the guest could not read the request"))
		return
	}
	var replies chan guestproto.InputReply
	if req.Op != guestproto.OpPutFile {
		// The server writes nothing after the request but for an upload, and the answers
		// to a cell's input(): the stream's end (the server closed it, or the connection
		// is gone) is the caller going away, and ends what it asked for.
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		if req.Op == guestproto.OpExecute && req.Stdin {
			replies = make(chan guestproto.InputReply, 1)
		}
		go func() {
			if replies != nil {
				for {
					var rep guestproto.InputReply
					if guestproto.ReadJSON(br, guestproto.MaxInput, &rep) != nil {
						break
					}
					select {
					case replies <- rep:
					default: // one asked at a time: an answer nobody asked for is dropped
					}
				}
			}
			io.Copy(io.Discard, io.LimitReader(br, 1<<10))
			cancel()
			// Nobody reads this stream any more: a write must not wait for room forever.
			st.SetWriteDeadline(time.Now())
		}()
	}
	switch req.Op {
	case guestproto.OpHello:
		writeMsg(st, guestproto.Message{Hello: &guestproto.Hello{Version: guestproto.Version,
			PID: os.Getpid(), UID: os.Getuid(), Root: s.opts.Workspace}})
	case guestproto.OpConfigure:
		writeMsg(st, s.configure(req.Config))
	case guestproto.OpExecute:
		s.execute(ctx, st, &req, replies, start)
	case guestproto.OpInterrupt:
		s.interrupt(req.RunID)
		writeMsg(st, guestproto.Message{OK: true})
	case guestproto.OpRestart:
		writeMsg(st, s.restart())
	case guestproto.OpCommand:
		writeMsg(st, s.command(ctx, st, req.RunID, req.Command, req.Dir, req.Stream))
	case guestproto.OpPutFile:
		writeMsg(st, s.putFile(req.Path, br))
	case guestproto.OpGetFile:
		s.getFile(st, req.Path)
	case guestproto.OpListFiles:
		writeMsg(st, s.listFiles(req.Path))
	case guestproto.OpDeleteFile:
		writeMsg(st, s.deleteFile(req.Path))
	case guestproto.OpMakeDir:
		writeMsg(st, s.makeDir(req.Path))
	case guestproto.OpMove:
		writeMsg(st, s.move(req.Path, req.To))
	case guestproto.OpRemove:
		writeMsg(st, s.remove(ctx, req.Path))
	case guestproto.OpTrust:
		writeMsg(st, s.trust(req.CA))
	case guestproto.OpCheckpoint:
		s.readyCheckpoint(ctx, st)
	case guestproto.OpStat:
		writeMsg(st, s.stat(req.Path))
	case guestproto.OpDeleteContext:
		writeMsg(st, s.deleteContext(req.Context))
	case guestproto.OpComplete, guestproto.OpInspect, guestproto.OpIsComplete:
		writeMsg(st, s.ask(ctx, &req))
	default:
		writeMsg(st, errMsg(api.CodeInvalidArgument, fmt.Sprintf("unknown guest operation %q", req.Op)))
	}
}

// readyCheckpoint answers OpCheckpoint: the listener closes, and then the connection, once
// the server has read the answer (it closes the stream: ctx ends), so that the answer is
// not lost with the connection. What else runs on the connection (the server holds the
// session's turn: a file call at most) ends with it.
func (s *server) readyCheckpoint(ctx context.Context, st *yamux.Stream) {
	if s.checkpoint == nil {
		writeMsg(st, errMsg(api.CodeFailedPrecondition, "this guest serves on its stdio and cannot be checkpointed"))
		return
	}
	s.checkpoint()
	writeMsg(st, guestproto.Message{OK: true})
	select {
	case <-ctx.Done():
	case <-time.After(checkpointAckTimeout):
	}
	st.Close()
	if m := s.mux.Load(); m != nil {
		m.Close()
	}
}

// checkpointAckTimeout bounds the wait for the server to read a checkpoint's answer.
const checkpointAckTimeout = 10 * time.Second

func errMsg(code, msg string) guestproto.Message {
	return guestproto.Message{Error: &guestproto.Error{Code: code, Message: msg}}
}

// errFrom turns an error classified with errdefs into a protocol error.
func errFrom(err error) guestproto.Message {
	code := errdefs.Code(err)
	if code == api.CodeInternal {
		code = api.CodeUnavailable
	}
	return errMsg(code, errText(err))
}

// writeMsg writes one message line. A line over the protocol's cap is made to fit: an
// output is replaced by a note, a command's output is cut.
func writeMsg(w io.Writer, m guestproto.Message) error {
	var b bytes.Buffer
	for {
		b.Reset()
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(m); err != nil {
			if m.Output == nil {
				m = errMsg(api.CodeInternal, "the guest could not encode its answer")
				continue
			}
			m = guestproto.Message{Output: &api.Output{Type: api.OutputStream, Name: "stderr",
				Text: "[cellbox: an output could not be encoded and was dropped]\n"}}
			continue
		}
		if b.Len() <= guestproto.MaxMessageSize {
			break
		}
		switch {
		case m.Output != nil:
			m = guestproto.Message{Output: &api.Output{Type: api.OutputStream, Name: "stderr",
				Text: fmt.Sprintf("[cellbox: an output of %s was too large to send and was dropped]\n", byteSize(int64(b.Len())))}}
		case m.CommandResult != nil:
			c := *m.CommandResult
			c.Stdout = c.Stdout[:runeCut([]byte(c.Stdout), len(c.Stdout)/2)]
			c.Stderr = c.Stderr[:runeCut([]byte(c.Stderr), len(c.Stderr)/2)]
			c.Truncated = true
			m = guestproto.Message{CommandResult: &c}
		default:
			m = errMsg(api.CodeInternal, "the guest's answer was too large to send")
		}
	}
	_, err := w.Write(b.Bytes())
	return err
}

// config returns the configuration, or nil before Configure.
func (s *server) config() *guestproto.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

func withDefaults(c guestproto.Config) guestproto.Config {
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = defaultMaxOutput
	}
	if c.MaxRichBytes <= 0 {
		c.MaxRichBytes = defaultMaxRich
	}
	if c.DefaultTimeoutS <= 0 {
		c.DefaultTimeoutS = defaultTimeout.Seconds()
	}
	if c.InterruptGraceS <= 0 {
		c.InterruptGraceS = defaultGrace.Seconds()
	}
	return c
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
