package e2b

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/statefile"
)

// maxContexts caps a sandbox's named contexts (the kernel holds 64 namespaces at most).
const maxContexts = 64

// sandboxState is what the E2B API keeps about a sandbox beyond its session: the code
// contexts (in a file of the state folder, so they survive a restart as the kernel does)
// and the processes started through envd (in memory: they end with the server process).
type sandboxState struct {
	file string // where the contexts are kept
	gone bool   // forgotten (its sandbox ended): the file is not written again; under mu

	mu       sync.Mutex
	contexts map[string]codeContext
	procs    map[uint32]*process
	nextPID  uint32
}

// sessionEvents is what the state needs of the session manager: to hear that a sandbox's
// session ended, and, once at start, which sessions live.
type sessionEvents interface {
	Owner(id string) (tenant string, ok bool)
	Subscribe(f func(session.Event)) (stop func())
}

// follow forgets the state of each sandbox whose session ends from now on (one that
// outlives the server process, detached at its exit, keeps it), and, once, the files of
// sandboxes that ended while no server ran.
func (h *Handler) follow(m sessionEvents) {
	h.live = m
	m.Subscribe(func(ev session.Event) {
		if ev.Kind == session.SessionEnded && !ev.Detached {
			h.forget(ev.SessionID)
		}
	})
	entries, _ := os.ReadDir(filepath.Join(h.opts.StateDir, "e2b", "contexts"))
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if _, live := m.Owner(id); ok && !live {
			h.forget(id)
		}
	}
}

// state returns the state of sandbox id, loading it on first use. A request that found its
// sandbox live may ask for it just after the sandbox ended, and its end was heard (follow):
// such a state is not kept.
func (h *Handler) state(id string) *sandboxState {
	st, added := h.stateOf(id)
	if added {
		if _, live := h.live.Owner(id); !live {
			h.forget(id)
		}
	}
	return st
}

func (h *Handler) stateOf(id string) (_ *sandboxState, added bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	st, ok := h.boxes[id]
	if !ok {
		st = &sandboxState{file: filepath.Join(h.opts.StateDir, "e2b", "contexts", id+".json"),
			contexts: map[string]codeContext{}, procs: map[uint32]*process{}, nextPID: 1000}
		if b, err := os.ReadFile(st.file); err == nil {
			var list []codeContext
			if json.Unmarshal(b, &list) == nil {
				for _, c := range list {
					st.contexts[c.ID] = c
				}
			}
		}
		h.boxes[id] = st
	}
	return st, !ok
}

// forget drops the state of an ended sandbox.
func (h *Handler) forget(id string) {
	h.mu.Lock()
	st := h.boxes[id]
	delete(h.boxes, id)
	h.mu.Unlock()
	file := filepath.Join(h.opts.StateDir, "e2b", "contexts", id+".json")
	if st != nil {
		st.mu.Lock()
		defer st.mu.Unlock()
		st.gone = true
	}
	os.Remove(file)
}

func (st *sandboxState) context(id string) (codeContext, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	c, ok := st.contexts[id]
	return c, ok
}

func (st *sandboxState) contextList() []codeContext {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]codeContext, 0, len(st.contexts))
	for _, c := range st.contexts {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

func (st *sandboxState) addContext(lang, cwd string) (codeContext, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.contexts) >= maxContexts {
		return codeContext{}, fmt.Errorf("this sandbox has its maximum of %d contexts: remove one first: %w", maxContexts, errdefs.ErrResourceExhausted)
	}
	var b [16]byte
	rand.Read(b[:])
	c := codeContext{ID: hex.EncodeToString(b[:]), Language: lang, Cwd: cwd}
	st.contexts[c.ID] = c
	return c, st.saveLocked()
}

func (st *sandboxState) removeContext(id string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	delete(st.contexts, id)
	st.saveLocked()
}

// saveLocked writes the contexts (atomically: a new file renamed over the old).
func (st *sandboxState) saveLocked() error {
	if st.gone {
		return nil
	}
	list := make([]codeContext, 0, len(st.contexts))
	for _, c := range st.contexts {
		list = append(list, c)
	}
	b, _ := json.Marshal(list)
	if err := os.MkdirAll(filepath.Dir(st.file), 0o700); err != nil {
		return fmt.Errorf("save contexts: %w", err)
	}
	if err := statefile.Write(st.file, b, 0o600); err != nil {
		return fmt.Errorf("save contexts: %w", err)
	}
	return nil
}
