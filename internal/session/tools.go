package session

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// A session's tools: functions its kernel offers as tools (from cellbox import tool). The
// kernel reports them all after a run that changed them (runKernel); they are checked
// (toolset.go), kept in the session's record, and told as a ToolsChanged event. A call is
// one Quiet execute of the cellbox module's _call, admitted as a cell. A kernel restart
// drops them, but for those the API's caller saved or loaded (SaveTool, LoadTools), which
// are defined again from the session's own copy. A report is written by the session's
// code: it may propose a tool for the tenant's library (save=True), never write there, nor
// choose what a kernel restart defines.

// Tools returns the session's tools, by name.
func (m *Manager) Tools(ctx context.Context, id string) ([]api.SessionTool, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]api.SessionTool, len(s.tools))
	for i, t := range s.tools {
		out[i] = t.view()
	}
	return out, nil
}

// tool finds one of the session's tools; unknown, the error names those there are.
func (s *Session) tool(name string) (*sessionTool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.tools {
		if t.Name == name {
			return t, nil
		}
	}
	if len(name) > 64 {
		name = name[:64] + "..."
	}
	return nil, fmt.Errorf("session %s has no tool %q (its tools: %s): define one with @tool from the cellbox module: %w",
		s.id, name, toolNames(s.tools), errdefs.ErrNotFound)
}

// CallTool calls one of the session's tools with req's arguments, after any execution
// already running there: the arguments are checked against the tool's schema first, then
// the call runs as a cell does (admission, timeout, interrupt, limits) without counting as
// one. Outputs go to onOutput as they happen (may be nil), but for the return value's.
func (m *Manager) CallTool(ctx context.Context, id, name string, req api.ToolCallRequest, onOutput func(api.Output)) (*api.ToolCallResult, error) {
	s, t, args, err := m.toolCall(ctx, id, name, req)
	if err != nil {
		return nil, err
	}
	timeout, err := m.timeout(req.TimeoutS)
	if err != nil {
		return nil, err
	}
	code := fmt.Sprintf(`__import__("cellbox")._call("%s", "%s")`, t.Name, base64.StdEncoding.EncodeToString(args))
	b, rctx, release, err := m.admitIn(ctx, s, kindExecute)
	if err != nil {
		return nil, err
	}
	defer release()
	var each func(api.Output)
	if onOutput != nil {
		each = func(o api.Output) {
			if !isToolResult(o) {
				onOutput(o)
			}
		}
	}
	res, set, err := runKernel(rctx, b.guest, api.ExecuteRequest{Code: code, TimeoutS: timeout}, true, ExecuteHooks{OnOutput: each})
	if err != nil {
		if res, err = m.afterGuestFailure(ctx, s, b, err); err != nil {
			return nil, err
		}
		b = m.current(s)
	}
	m.afterRun(ctx, s, b, res, set)
	res.Message = withNote(res.Message, m.sessionArtifacts(s, res.Files, req.Links))
	m.metrics.observe("execute", res.Status, time.Duration(res.DurationMS)*time.Millisecond)
	return toolResult(res), nil
}

// CheckToolCall refuses what CallTool would refuse before running anything (an unknown
// session or tool, bad arguments, a bad timeout), for a caller that answers before the
// call ends (a stream).
func (m *Manager) CheckToolCall(ctx context.Context, id, name string, req api.ToolCallRequest) error {
	_, _, _, err := m.toolCall(ctx, id, name, req)
	if err == nil {
		_, err = m.timeout(req.TimeoutS)
	}
	return err
}

// toolCall finds the session and tool of a call and checks its arguments.
func (m *Manager) toolCall(ctx context.Context, id, name string, req api.ToolCallRequest) (*Session, *sessionTool, []byte, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, nil, nil, err
	}
	t, err := s.tool(name)
	if err != nil {
		return nil, nil, nil, err
	}
	args, err := t.check(req.Arguments)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", err.Error(), errdefs.ErrInvalidArgument)
	}
	return s, t, args, nil
}

// isToolResult: o is a call's return value (guestproto.ToolResultMIME).
func isToolResult(o api.Output) bool {
	if o.Type != api.OutputDisplayData {
		return false
	}
	_, ok := o.Data[guestproto.ToolResultMIME]
	return ok
}

// toolResult is a call's result: the return value picked out of the outputs and decoded.
func toolResult(res *api.ExecuteResult) *api.ToolCallResult {
	out := &api.ToolCallResult{Status: res.Status, Outputs: []api.Output{}, Files: res.Files, Truncated: res.Truncated,
		DurationMS: res.DurationMS, Message: res.Message}
	if out.Files == nil {
		out.Files = []api.FileChange{}
	}
	for _, o := range res.Outputs {
		if !isToolResult(o) {
			out.Outputs = append(out.Outputs, o)
			continue
		}
		// {"value": JSON} or {"text": repr, "type": name}; the last one counts.
		v, _ := o.Data[guestproto.ToolResultMIME].(map[string]any)
		value, has := v["value"]
		text, _ := v["text"].(string)
		typ, _ := v["type"].(string)
		out.HasValue, out.Value, out.Text, out.ValueType = has, nil, "", ""
		if has {
			out.Value = value
		} else {
			out.Text, out.ValueType = text, typ
		}
	}
	return out
}

// afterRun is what every run in the kernel ends with, while it holds the session's turn:
// the tool set it reported (may be nil) is taken, and after a run that cost the kernel
// (res.KernelRestarted: out of memory, crashed, stuck past an interrupt, or dead before the
// run; the guest or the manager started a new one) the tools the kernel lost are dropped
// but for the saved ones, which are loaded again; res tells what happened to them.
func (m *Manager) afterRun(ctx context.Context, s *Session, b *box, res *api.ExecuteResult, set *guestproto.ToolSet) {
	s.mu.Lock()
	before := s.tools
	s.mu.Unlock()
	if set != nil {
		for _, note := range m.toolsReported(s, set) {
			res.Outputs = append(res.Outputs, api.Output{Type: api.OutputStream, Name: "stderr", Text: "[cellbox: " + note + "]\n"})
		}
	}
	if res.KernelRestarted {
		if set == nil {
			m.setTools(s, nil) // the new kernel has none
		}
		if msg := m.kernelRestarted(ctx, s, b, before); msg != "" {
			if res.Message != "" && !strings.HasSuffix(res.Message, ".") {
				res.Message += "."
			}
			res.Message = strings.TrimSpace(res.Message + " " + msg)
		}
	}
}

// toolsReported takes the tool set a run of s reported: it is checked (a tool that fails
// is dropped, with a log line) and becomes the session's. Nothing of it reaches the
// tenant's library: save is a proposal, for the API's caller (SaveTool). A tool stays saved
// (reloaded after a kernel restart) only while it is reported as it was saved. The notes
// are for the run's caller.
func (m *Manager) toolsReported(s *Session, set *guestproto.ToolSet) (notes []string) {
	s.mu.Lock()
	prev := s.tools
	s.mu.Unlock()
	tools, refused := checkToolSet(set, prev, true)
	for _, r := range refused {
		m.log.Warn("a tool the kernel reported was dropped", "session_id", s.id, "tool", r)
		notes = append(notes, "a tool was not offered: "+r)
	}
	m.changeTools(s, func(now []*sessionTool) []*sessionTool {
		was := map[string]*sessionTool{}
		for _, t := range now {
			was[t.Name] = t
		}
		for _, t := range tools {
			if p := was[t.Name]; p != nil && p.saved && p.same(t) {
				t.saved = true
			}
		}
		return tools
	})
	return notes
}

// setTools makes tools the session's; as changeTools.
func (m *Manager) setTools(s *Session, tools []*sessionTool) {
	m.changeTools(s, func([]*sessionTool) []*sessionTool { return tools })
}

// changeTools makes change(the session's tools) the session's tools, in one step under
// s.mu (change must not block, nor change what it is given); when they changed, the record
// is written and ToolsChanged told.
func (m *Manager) changeTools(s *Session, change func(now []*sessionTool) []*sessionTool) {
	s.mu.Lock()
	tools := change(s.tools)
	same := slices.EqualFunc(s.tools, tools, func(a, b *sessionTool) bool {
		return a.same(b) && a.Save == b.Save && a.saved == b.saved && bytes.Equal(a.InputSchema, b.InputSchema)
	})
	s.tools = tools
	if same || s.closed {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	m.save(s)
	m.events.publish(Event{Kind: ToolsChanged, SessionID: s.id, Tenant: s.tenant})
}

// markSaved marks the session's tool of want's name saved, if it is want as it is (its
// name, description, source and schema); false if the session has no such tool.
func (m *Manager) markSaved(s *Session, want *sessionTool) bool {
	found := false
	m.changeTools(s, func(now []*sessionTool) []*sessionTool {
		tools := slices.Clone(now)
		for i, t := range tools {
			if t.Name == want.Name && t.same(want) {
				c := *t // a fork shares the pointers: never change one
				c.saved = true
				tools[i], found = &c, true
			}
		}
		return tools
	})
	return found
}

// SaveTool saves one of the session's tools, as the session has it now, to the tenant's
// library, and marks it saved: a kernel restart defines it again from this copy. It is
// the API's caller's act: the session's code only proposes a tool (@tool(save=True),
// which makes its source stand alone); one it did not propose is refused, as is one whose
// source is no longer req.Source (when given).
func (m *Manager) SaveTool(ctx context.Context, id, name string, req api.SaveToolRequest) (*api.SavedTool, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	t, err := s.tool(name)
	if err != nil {
		return nil, err
	}
	switch {
	case !t.Save:
		return nil, fmt.Errorf("the tool %s was not defined with @tool(save=True), so its source may use the session's other variables: "+
			"define it with save=True (which checks that its source stands alone), then save it: %w", t.Name, errdefs.ErrFailedPrecondition)
	case req.Source != "" && req.Source != t.Source:
		return nil, fmt.Errorf("the tool %s was defined again since you read it: read its source again (GET /v1/sessions/{id}/tools) and save that: %w",
			t.Name, errdefs.ErrFailedPrecondition)
	}
	if err := m.lib.save(s.tenant, t.Tool); err != nil {
		return nil, err
	}
	m.markSaved(s, t) // unless the session's code defined it again meanwhile
	saved, at, err := m.lib.get(s.tenant, name)
	if err != nil {
		return nil, err
	}
	v := savedView(saved, at)
	return &v, nil
}

// kernelRestarted tells what a kernel restart did to the tools the session had before
// (b's kernel, while the caller holds the turn): those the new kernel lacks are dropped,
// but for the saved ones, which are loaded again from the session's own copy (never from
// the library, whose version another session may have saved since). It says what happened,
// for the restart's caller ("" when nothing was lost).
func (m *Manager) kernelRestarted(ctx context.Context, s *Session, b *box, before []*sessionTool) string {
	has := func() map[string]bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		names := map[string]bool{}
		for _, t := range s.tools {
			names[t.Name] = true
		}
		return names
	}
	now := has()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ExecTimeout)
	defer cancel()
	var dropped, want, failed []string
	lost := false
	for _, t := range before {
		switch {
		case now[t.Name]:
			continue // defined again in the new kernel by the run itself
		case !t.saved:
			dropped = append(dropped, t.Name)
			continue
		}
		want = append(want, t.Name)
		if lost {
			continue
		}
		if err := m.loadTool(ctx, s, b, t); err != nil {
			failed = append(failed, fmt.Sprintf("%s (%s)", t.Name, errdefs.Public(m.log, err, "session_id", s.id, "tool", t.Name)))
			lost = errors.Is(err, errKernelLost)
		}
	}
	// What is loaded is what the kernel reported last: a load that cost the kernel again
	// took the ones before it.
	now = has()
	var reloaded, gone []string
	for _, name := range want {
		switch {
		case now[name]:
			reloaded = append(reloaded, name)
		case !slices.ContainsFunc(failed, func(f string) bool { return strings.HasPrefix(f, name+" (") }):
			gone = append(gone, name)
		}
	}
	var msg []string
	if len(dropped) > 0 {
		msg = append(msg, fmt.Sprintf("The kernel restart dropped the tools %s (not saved: define them again).", strings.Join(dropped, ", ")))
	}
	if len(failed) > 0 {
		msg = append(msg, fmt.Sprintf("Saved tools that could not be loaded again: %s.", strings.Join(failed, "; ")))
	}
	if len(gone) > 0 {
		msg = append(msg, fmt.Sprintf("Saved tools not loaded, the kernel having restarted again: %s (POST /v1/sessions/{id}/tools/load loads them).", strings.Join(gone, ", ")))
	}
	if len(reloaded) > 0 {
		msg = append(msg, fmt.Sprintf("Saved tools loaded again: %s.", strings.Join(reloaded, ", ")))
	}
	return strings.Join(msg, " ")
}

// newKernel drops the tools of a session whose kernel was replaced by a new one (a
// restart; the caller holds the turn) and loads its saved ones again; as kernelRestarted.
func (m *Manager) newKernel(ctx context.Context, s *Session, b *box) string {
	s.mu.Lock()
	before := s.tools
	s.mu.Unlock()
	if len(before) == 0 {
		return ""
	}
	m.setTools(s, nil)
	return m.kernelRestarted(ctx, s, b, before)
}

// errKernelLost: loading a saved tool cost the kernel (it restarted, with no tools).
var errKernelLost = errors.New("loading it cost the kernel, which restarted with no tools")

// loadTool defines a saved tool (the session's own copy, or the library's version the
// caller asked for) in b's kernel (the caller holds the session's turn): a Quiet execute
// of the cellbox module's _load, whose report makes it the session's; the tool is then the
// session's saved copy, if the kernel reported it as it is.
func (m *Manager) loadTool(ctx context.Context, s *Session, b *box, t *sessionTool) error {
	code := fmt.Sprintf(`__import__("cellbox")._load("%s")`, base64.StdEncoding.EncodeToString([]byte(t.Source)))
	res, set, err := runKernel(ctx, b.guest, api.ExecuteRequest{Code: code, TimeoutS: m.cfg.ExecTimeout.Seconds()}, true, ExecuteHooks{})
	if err != nil {
		return err
	}
	if set != nil {
		m.toolsReported(s, set)
	} else if res.KernelRestarted {
		m.setTools(s, nil) // the new kernel has none
	}
	if res.Status != api.StatusOK {
		why := res.Message
		for _, o := range res.Outputs {
			if o.Type == api.OutputError {
				why = o.EName + ": " + o.EValue
			}
		}
		if why == "" {
			why = res.Status
		}
		if res.KernelRestarted {
			return fmt.Errorf("%w: %s: %w", errKernelLost, why, errdefs.ErrFailedPrecondition)
		}
		return fmt.Errorf("loading it failed: %s: %w", why, errdefs.ErrFailedPrecondition)
	}
	if !m.markSaved(s, t) {
		return fmt.Errorf("loading it did not define it as it was saved (the session's cellbox module was changed?): %w", errdefs.ErrFailedPrecondition)
	}
	return nil
}

// LoadTools defines saved tools of ctx's tenant in the session's kernel, after any
// execution already running there: those named, or all of them when names is empty, as the
// library has them now. Each becomes the session's saved copy, which a kernel restart
// defines again. It returns the session's tools after; a tool that fails to load is an
// error naming it (the ones before it are loaded).
func (m *Manager) LoadTools(ctx context.Context, id string, names []string) ([]api.SessionTool, error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		all, err := m.lib.list(s.tenant, true)
		if err != nil {
			return nil, err
		}
		for _, t := range all {
			names = append(names, t.Name)
		}
	}
	if len(names) > MaxSavedTools {
		return nil, fmt.Errorf("names has %d tools; at most %d: %w", len(names), MaxSavedTools, errdefs.ErrInvalidArgument)
	}
	var load []*sessionTool
	for _, name := range names {
		t, _, err := m.lib.get(s.tenant, name)
		if err != nil {
			return nil, err
		}
		load = append(load, t)
	}
	b, rctx, release, err := m.admitIn(ctx, s, kindExecute)
	if err != nil {
		return nil, err
	}
	defer release()
	for _, t := range load {
		if err := m.loadTool(rctx, s, b, t); err != nil {
			if !b.alive() {
				if _, ferr := m.afterGuestFailure(ctx, s, b, err); ferr != nil {
					return nil, ferr
				}
			}
			return nil, fmt.Errorf("saved tool %s: %w", t.Name, err)
		}
	}
	return m.Tools(ctx, id)
}

// toolRecord is a tool in a session's record: as its kernel reported it, and whether it is
// the session's saved copy (sessionTool.saved). A record from before saved copies has
// none: its tools' save was the kernel's, which now only proposes.
type toolRecord struct {
	guestproto.Tool
	Saved bool `json:"saved,omitempty"`
}

// toolRecords is the record's copy of tools.
func toolRecords(tools []*sessionTool) []toolRecord {
	out := make([]toolRecord, len(tools))
	for i, t := range tools {
		out[i] = toolRecord{Tool: t.Tool, Saved: t.saved}
	}
	return out
}

// restoreTools gives a session restored with its kernel the tools of its record, checked
// again.
func (m *Manager) restoreTools(s *Session, r record) {
	if len(r.Tools) == 0 {
		return
	}
	set := &guestproto.ToolSet{}
	saved := map[string]bool{}
	for _, t := range r.Tools {
		set.Tools = append(set.Tools, t.Tool)
		if _, ok := saved[t.Name]; !ok { // checkToolSet keeps the first of a name
			saved[t.Name] = t.Saved
		}
	}
	tools, refused := checkToolSet(set, nil, false)
	for _, why := range refused {
		m.log.Warn("a tool in a session's record was dropped", "session_id", s.id, "tool", why)
	}
	for _, t := range tools {
		t.saved = saved[t.Name]
	}
	s.tools = tools
}
