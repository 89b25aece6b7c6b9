package session

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
	"github.com/cellbox/cellbox/internal/guestproto"
	"github.com/cellbox/cellbox/internal/statefile"
)

// The library keeps each tenant's saved tools on this server, written only at the API
// caller's word (Manager.SaveTool; a kernel's save=True only proposes), never by a
// session's code, since every session of the tenant may load them: one JSON
// file per tool, named by the tool, in a folder per tenant named by a hash of the tenant,
// under the state dir's "tools" folder; written whole (statefile). In a cluster each node
// has its own library.

// MaxSavedTools caps a tenant's saved tools (on a server).
const MaxSavedTools = 256

type library struct {
	dir string // "": none (no state dir)
	// mu serializes a tenant's changes (a save's count of the tools there, then its
	// write), by a shard of the tenants: one tenant's writes do not wait on others'.
	mu [64]sync.Mutex
}

// lock takes the lock of tenant's changes; the caller unlocks it.
func (l *library) lock(tenant string) *sync.Mutex {
	sum := sha256.Sum256([]byte(tenant))
	mu := &l.mu[int(sum[0])%len(l.mu)]
	mu.Lock()
	return mu
}

// saved is a library file.
type saved struct {
	guestproto.Tool
	SavedAt time.Time `json:"saved_at"`
}

func (l *library) tenantDir(tenant string) string {
	sum := sha256.Sum256([]byte("cellbox saved tools\x00" + tenant))
	return filepath.Join(l.dir, hex.EncodeToString(sum[:16]))
}

func noSavedTool(name string) error {
	if len(name) > 64 {
		name = name[:64] + "..."
	}
	return fmt.Errorf("no saved tool %q: GET /v1/saved-tools lists yours: %w", name, errdefs.ErrNotFound)
}

var errNoLibrary = fmt.Errorf("this server keeps no saved tools (it has no state dir): %w", errdefs.ErrFailedPrecondition)

// save keeps t (checked already) as the tenant's; an unchanged tool is not written again.
func (l *library) save(tenant string, t guestproto.Tool) error {
	return l.write(tenant, t, time.Now(), func(old saved) bool {
		return old.Description == t.Description && old.Source == t.Source && string(old.InputSchema) == string(t.InputSchema)
	}, nil)
}

// keep stores t, saved at at on another server of a cluster, unless this one keeps a
// version as new; it is checked, as a report is, before it is written.
func (l *library) keep(tenant string, t guestproto.Tool, at time.Time) error {
	return l.write(tenant, t, at, func(old saved) bool { return !old.SavedAt.Before(at) }, func() error {
		if _, err := checkTool(t, nil, true); err != nil {
			return fmt.Errorf("saved tool %s from another node: %v: %w", t.Name, err, errdefs.ErrFailedPrecondition)
		}
		return nil
	})
}

// write stores t as the tenant's, saved at at, unless the tool of its name there is one
// to keep (current), after check (may be nil); a new one counts against MaxSavedTools.
func (l *library) write(tenant string, t guestproto.Tool, at time.Time, current func(saved) bool, check func() error) error {
	if l.dir == "" {
		return errNoLibrary
	}
	t.Save = true
	defer l.lock(tenant).Unlock()
	dir := l.tenantDir(tenant)
	path := filepath.Join(dir, t.Name+".json")
	if old, err := readSaved(path); err == nil {
		if current(old) {
			return nil
		}
	} else if names, err := l.names(dir); err != nil {
		return err
	} else if len(names) >= MaxSavedTools {
		return fmt.Errorf("you have %d saved tools, the most an API key may keep on a server: delete one (DELETE /v1/saved-tools/{name}): %w",
			MaxSavedTools, errdefs.ErrResourceExhausted)
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("saved tools: %w", err)
	}
	data, err := json.Marshal(saved{Tool: t, SavedAt: at.UTC()})
	if err != nil {
		return err
	}
	if err := statefile.Write(path, data, 0o600); err != nil {
		return fmt.Errorf("save tool %s: %w", t.Name, err)
	}
	return nil
}

func readSaved(path string) (saved, error) {
	var s saved
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &s)
	}
	return s, err
}

// names lists the tools in a tenant's folder, in name order.
func (l *library) names(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("saved tools: %w", err)
	}
	var names []string
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".json"); ok && e.Type().IsRegular() && toolName.MatchString(name) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// get returns the tenant's saved tool, checked again (a file that no longer passes is
// not found).
func (l *library) get(tenant, name string) (*sessionTool, time.Time, error) {
	if l.dir == "" {
		return nil, time.Time{}, errNoLibrary
	}
	if !toolName.MatchString(name) {
		return nil, time.Time{}, noSavedTool(name)
	}
	s, err := readSaved(filepath.Join(l.tenantDir(tenant), name+".json"))
	if err != nil || s.Name != name {
		return nil, time.Time{}, noSavedTool(name)
	}
	t, err := checkTool(s.Tool, nil, false)
	if err != nil {
		return nil, time.Time{}, noSavedTool(name)
	}
	return t, s.SavedAt, nil
}

// list returns the tenant's saved tools, in name order; without sources when index.
func (l *library) list(tenant string, index bool) ([]api.SavedTool, error) {
	if l.dir == "" {
		return []api.SavedTool{}, nil
	}
	names, err := l.names(l.tenantDir(tenant))
	if err != nil {
		return nil, err
	}
	out := []api.SavedTool{}
	for _, name := range names {
		if t, at, err := l.get(tenant, name); err == nil {
			v := savedView(t, at)
			if index {
				v.Source = ""
			}
			out = append(out, v)
		}
	}
	return out, nil
}

func (l *library) remove(tenant, name string) error {
	if l.dir == "" {
		return errNoLibrary
	}
	if !toolName.MatchString(name) {
		return noSavedTool(name)
	}
	defer l.lock(tenant).Unlock()
	err := os.Remove(filepath.Join(l.tenantDir(tenant), name+".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return noSavedTool(name)
	}
	if err != nil {
		return fmt.Errorf("delete saved tool %s: %w", name, err)
	}
	return nil
}

func savedView(t *sessionTool, at time.Time) api.SavedTool {
	return api.SavedTool{Name: t.Name, Description: t.Description, InputSchema: t.doc, Source: t.Source, SavedAt: at}
}

// SavedTools lists the saved tools of ctx's tenant on this server, in name order.
func (m *Manager) SavedTools(ctx context.Context) ([]api.SavedTool, error) {
	return m.lib.list(Tenant(ctx), false)
}

// SavedToolIndex is SavedTools without the tools' sources.
func (m *Manager) SavedToolIndex(ctx context.Context) ([]api.SavedTool, error) {
	return m.lib.list(Tenant(ctx), true)
}

// SavedTool returns one of ctx's tenant's saved tools.
func (m *Manager) SavedTool(ctx context.Context, name string) (*api.SavedTool, error) {
	t, at, err := m.lib.get(Tenant(ctx), name)
	if err != nil {
		return nil, err
	}
	v := savedView(t, at)
	return &v, nil
}

// KeepSavedTool keeps t, a saved tool of ctx's tenant that another node of a cluster
// holds, in this server's library, unless it has a version as new (by SavedAt): a
// session here can then load it, and load it again after a kernel restart.
func (m *Manager) KeepSavedTool(ctx context.Context, t api.SavedTool) error {
	schema, err := json.Marshal(t.InputSchema)
	if err != nil {
		return fmt.Errorf("saved tool %s: its input schema: %w", t.Name, errdefs.ErrInvalidArgument)
	}
	return m.lib.keep(Tenant(ctx), guestproto.Tool{Name: t.Name, Description: t.Description, InputSchema: schema, Source: t.Source}, t.SavedAt)
}

// DeleteSavedTool removes one of ctx's tenant's saved tools from the library; sessions
// that have it defined keep it until their kernel restarts.
func (m *Manager) DeleteSavedTool(ctx context.Context, name string) error {
	return m.lib.remove(Tenant(ctx), name)
}
