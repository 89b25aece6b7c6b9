package guestproto

import (
	"context"
	"fmt"
	"unicode/utf8"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// ask sends one of the kernel's questions (complete, inspect, is_complete) and returns the
// final message, refusing a guest that predates them.
func (c *Client) ask(ctx context.Context, req Request) (*Message, error) {
	if !c.Supports(VersionAsk) {
		return nil, fmt.Errorf("this session's sandbox runs an older guest, which cannot answer %s: restart the session's kernel: %w",
			req.Op, errdefs.ErrFailedPrecondition)
	}
	var m Message
	if err := c.roundTrip(ctx, req, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// Complete asks the kernel's completer. The answer is checked: offsets within the code,
// at most MaxCompletions matches.
func (c *Client) Complete(ctx context.Context, req api.CompleteRequest) (*api.Completion, error) {
	m, err := c.ask(ctx, Request{Op: OpComplete, Complete: &req})
	if err != nil {
		return nil, err
	}
	cp := m.Completion
	n := utf8.RuneCountInString(req.Code)
	switch {
	case cp == nil:
		return nil, fmt.Errorf("guest answered complete without a completion: %w", errdefs.ErrUnavailable)
	case cp.CursorStart < 0 || cp.CursorStart > cp.CursorEnd || cp.CursorEnd > n || len(cp.Matches) > MaxCompletions ||
		len(cp.Types) != 0 && len(cp.Types) != len(cp.Matches):
		return nil, fmt.Errorf("guest answered complete with a completion out of bounds: %w", errdefs.ErrUnavailable)
	}
	if cp.Matches == nil {
		cp.Matches = []string{}
	}
	return cp, nil
}

// Inspect asks the kernel's inspector.
func (c *Client) Inspect(ctx context.Context, req api.InspectRequest) (*api.Inspection, error) {
	m, err := c.ask(ctx, Request{Op: OpInspect, Inspect: &req})
	if err != nil {
		return nil, err
	}
	if m.Inspection == nil {
		return nil, fmt.Errorf("guest answered inspect without an inspection: %w", errdefs.ErrUnavailable)
	}
	return m.Inspection, nil
}

// IsComplete asks whether code is ready to run.
func (c *Client) IsComplete(ctx context.Context, code string) (*api.IsComplete, error) {
	m, err := c.ask(ctx, Request{Op: OpIsComplete, Code: code})
	if err != nil {
		return nil, err
	}
	ic := m.IsComplete
	if ic == nil {
		return nil, fmt.Errorf("guest answered is_complete without a status: %w", errdefs.ErrUnavailable)
	}
	switch ic.Status {
	case "complete", "incomplete", "invalid", "unknown":
	default:
		return nil, fmt.Errorf("guest answered is_complete with status %q: %w", ic.Status, errdefs.ErrUnavailable)
	}
	if len(ic.Indent) > 256 {
		ic.Indent = ic.Indent[:256]
	}
	return ic, nil
}

// CheckUserExpressions checks an execution's user expressions: at most MaxUserExpressions,
// each key and expression at most MaxUserExpression bytes. Both the server and the guest
// check them.
func CheckUserExpressions(exprs map[string]string) error {
	if len(exprs) > MaxUserExpressions {
		return fmt.Errorf("%d user expressions, more than the %d an execution may have: %w", len(exprs), MaxUserExpressions, errdefs.ErrInvalidArgument)
	}
	for k, v := range exprs {
		if len(k) > MaxUserExpression || len(v) > MaxUserExpression {
			return fmt.Errorf("a user expression or its key is longer than %d bytes: %w", MaxUserExpression, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// CheckAsk checks the code and cursor of a complete or inspect request.
func CheckAsk(code string, pos *int) error {
	if len(code) > MaxAskCode {
		return fmt.Errorf("the code to complete or inspect is %d bytes, more than %d: %w", len(code), MaxAskCode, errdefs.ErrInvalidArgument)
	}
	if pos != nil && (*pos < 0 || *pos > utf8.RuneCountInString(code)) {
		return fmt.Errorf("cursor_pos %d is outside the code (0 to %d, in code points): %w", *pos, utf8.RuneCountInString(code), errdefs.ErrInvalidArgument)
	}
	return nil
}
