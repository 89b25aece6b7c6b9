package mcpserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/tool"
)

// MetaSessionID is the key of a tool result's _meta that names the session the call ran in.
const MetaSessionID = "cellbox/session_id"

// callTool runs a call of one of the built-in tools (python, shell, a language's: those of
// builtins). Everything but a canceled request is a result: isError when the code failed,
// the arguments were bad, the named session does not exist or the service could not run
// the call.
func (s *Server) callTool(ctx context.Context, c *conn, req *mcp.CallToolRequest, builtins []tool.Definition) (*mcp.CallToolResult, error) {
	call, err := tool.Decode(req.Params.Name, req.Params.Arguments, builtins...)
	if err != nil {
		return errorResult(err.Error()), nil
	}
	if c = s.attach(ctx, c, req.Session); c == nil {
		return s.serviceError(ctx, errClosed)
	}
	id, note := call.SessionID, ""
	if id != "" {
		if _, err := s.m.Get(ctx, id); err != nil {
			return errorResult(fmt.Sprintf("There is no session %q: it never existed, ended, or was idle too long. "+
				"Leave session_id out to use this connection's own session.", trim(id, 64))), nil
		}
	} else if id, note, err = s.ownSession(ctx, c); err != nil {
		return s.serviceError(ctx, err)
	}
	c.used(id)
	p := startProgress(ctx, req)
	res, err := tool.Run(ctx, s.m, id, call, s.opts.Render, p.output)
	p.stop()
	// The tools the call defined are listed before its result is sent.
	s.syncTools(ctx, c)
	if err != nil {
		return s.serviceError(ctx, err)
	}
	text := res.Text
	if note != "" {
		text += "\n\n" + note
	}
	out := &mcp.CallToolResult{
		Meta:    mcp.Meta{MetaSessionID: id},
		Content: []mcp.Content{&mcp.TextContent{Text: text}},
		IsError: res.IsError,
	}
	for _, img := range res.Images {
		data, err := base64.StdEncoding.DecodeString(img.Data)
		if err != nil { // tool.RenderExecute checked it
			continue
		}
		out.Content = append(out.Content, &mcp.ImageContent{MIMEType: img.MIME, Data: data})
	}
	return out, nil
}

func errorResult(text string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: true}
}

// serviceError turns a failure of cellbox into a result the model reads. A request the
// client canceled stays an error: nobody waits for its result.
func (s *Server) serviceError(ctx context.Context, err error) (*mcp.CallToolResult, error) {
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if errdefs.Code(err) == api.CodeResourceExhausted {
		return errorResult("cellbox could not run the call: the server is at its limit of sessions or resources (" + err.Error() + "). Try again later."), nil
	}
	return errorResult("cellbox could not run the call: " + errdefs.Public(s.log, err, "in", "mcp tool call")), nil
}

// progress sends notifications/progress while a call runs, when the request asked for
// them: at once on the first output, then at most and at least about once a second.
type progress struct {
	ss    *mcp.ServerSession
	token any
	start time.Time
	done  chan struct{}
	wg    sync.WaitGroup

	mu      sync.Mutex
	ctx     context.Context
	n       float64 // notifications sent
	sentAt  time.Time
	outputs int
	last    string // the last line printed
}

// startProgress starts reporting; the returned value is safe to use (a no-op) when the
// request carries no progress token.
func startProgress(ctx context.Context, req *mcp.CallToolRequest) *progress {
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil
	}
	p := &progress{ss: req.Session, token: token, start: time.Now(), done: make(chan struct{}), ctx: ctx}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				p.mu.Lock()
				if time.Since(p.sentAt) >= 900*time.Millisecond {
					p.send()
				}
				p.mu.Unlock()
			}
		}
	}()
	return p
}

func (p *progress) output(o api.Output) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.outputs++
	if o.Type == api.OutputStream {
		if line := lastLine(o.Text); line != "" {
			p.last = line
		}
	}
	if time.Since(p.sentAt) >= time.Second {
		p.send()
	}
}

// send sends one notification; p.mu is held, so that their progress values increase.
func (p *progress) send() {
	p.n++
	p.sentAt = time.Now()
	msg := fmt.Sprintf("running for %d s, %d output(s)", int(time.Since(p.start).Seconds()), p.outputs)
	if p.last != "" {
		msg += "; last printed: " + p.last
	}
	p.ss.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token, Progress: p.n, Message: msg})
}

// stop ends reporting before the result is sent.
func (p *progress) stop() {
	if p == nil {
		return
	}
	close(p.done)
	p.wg.Wait()
}

// lastLine is the last non-blank line of s, cut to 100 characters.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\r\n\t "), "\n")
	return trim(strings.TrimSpace(lines[len(lines)-1]), 100)
}

// trim cuts s to at most n bytes on a character boundary, marking the cut.
func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return tool.Prefix(s, n) + "..."
}
