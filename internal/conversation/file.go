package conversation

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/statefile"
)

// fileVersion is the version of a conversation's file; a file of another version is left
// alone (and logged).
const fileVersion = 1

// saved is a conversation's file.
type saved struct {
	Version int                    `json:"version"`
	Tenant  string                 `json:"tenant"`
	Info    api.Conversation       `json:"info"`
	System  string                 `json:"system,omitempty"`
	Turns   []api.ConversationTurn `json:"turns"`
	History []llm.Message          `json:"history"` // what the model is sent, as agent.History gives it
}

func (s *Store) file(id string) string { return filepath.Join(s.opts.Dir, id+".json") }

// save writes c's file, when the store has a Dir: its state as of its last answer's end.
func (s *Store) save(c *conv) {
	if s.opts.Dir == "" {
		return
	}
	c.saving.Lock()
	defer c.saving.Unlock()
	s.mu.Lock()
	if c.gone {
		s.mu.Unlock()
		return // forgotten meanwhile: no file to bring back
	}
	f := saved{Version: fileVersion, Tenant: c.tenant, Info: c.info, System: c.system, Turns: slices.Clone(c.turns), History: c.kept}
	s.mu.Unlock()
	data, err := json.Marshal(f) // outside the lock: a conversation's file may be megabytes
	if err == nil {
		err = statefile.Write(s.file(c.info.ID), data, 0o600)
	}
	if err != nil {
		// The conversation goes on in memory; only a restart would lose it.
		s.opts.Logger.Warn("save a conversation", "conversation_id", c.info.ID, "err", err)
	}
}

// load reads the conversations kept in Dir. A file that cannot be read is logged and left
// alone; an answer the last server was writing when it stopped is marked as failed.
func (s *Store) load() error {
	entries, err := os.ReadDir(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("conversations: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || !strings.HasSuffix(name, ".json") || strings.HasPrefix(name, ".") {
			continue
		}
		var f saved
		data, err := os.ReadFile(filepath.Join(s.opts.Dir, name))
		if err == nil {
			err = json.Unmarshal(data, &f)
		}
		if err == nil && (f.Version != fileVersion || f.Info.ID+".json" != name) {
			err = fmt.Errorf("version %d, id %q", f.Version, f.Info.ID)
		}
		if err != nil {
			s.opts.Logger.Warn("a conversation's file cannot be read; left alone", "file", name, "err", err)
			continue
		}
		c := &conv{mu: &s.mu, tenant: f.Tenant, info: f.Info, system: f.System, turns: f.Turns, kept: f.History}
		c.info.State, c.info.Waiting = api.ConversationIdle, nil
		c.sizes = make([]int, len(c.turns))
		for i := range c.turns {
			if c.turns[i].StopReason == "" {
				c.turns[i].StopReason, c.turns[i].Error = api.AgentError, "the server stopped while this answer was written"
			}
			c.sizes[i] = jsonSize(c.turns[i])
		}
		// Under the lock: the manager may tell of a session's end (sessionEvent) meanwhile.
		s.mu.Lock()
		s.convs[c.info.ID] = c
		s.mu.Unlock()
	}
	// Those whose sessions ended while no server ran go now, files and all.
	s.mu.Lock()
	all := make([]*conv, 0, len(s.convs))
	for _, c := range s.convs {
		all = append(all, c)
	}
	s.mu.Unlock()
	for _, c := range all {
		ctx := session.WithTenant(context.Background(), c.tenant)
		if _, err := s.opts.Sessions.Get(ctx, c.info.SessionID); errdefs.Code(err) == api.CodeNotFound {
			s.forget(c)
		}
	}
	return nil
}
