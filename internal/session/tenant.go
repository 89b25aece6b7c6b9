package session

import (
	"context"
	"fmt"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

// A tenant owns sessions: the name of the API key a request came with, or "" on a server
// without keys (and for cellbox's own callers: run, repl, chat, mcp on stdio).

type tenantKey struct{}

// WithTenant returns ctx for calls on behalf of tenant. The Manager's calls with it find,
// list, end and run in that tenant's sessions only, and count against its caps. A context
// without a tenant is the tenant "", which sees only the sessions created without one.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

type elsewhereKey struct{}

// WithElsewhere returns ctx carrying the caller's sessions on the other nodes of a cluster,
// for a list that is the whole cluster's (the E2B API's, whose pages it cuts itself).
func WithElsewhere(ctx context.Context, sessions []api.Session) context.Context {
	return context.WithValue(ctx, elsewhereKey{}, sessions)
}

// Elsewhere returns the sessions WithElsewhere put in ctx; none outside a cluster.
func Elsewhere(ctx context.Context) []api.Session {
	s, _ := ctx.Value(elsewhereKey{}).([]api.Session)
	return s
}

// Tenant returns the tenant of ctx; "" when it has none.
func Tenant(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}

// tenantUse is what each tenant holds besides its sessions; guarded by Manager.mu.
type tenantUse struct {
	starting map[string]int // sessions and one-shots being set up or running (Manager.starting)
	running  map[string]int // executions and commands running or waiting for their turn
}

func decr(counts map[string]int, tenant string) {
	if counts[tenant]--; counts[tenant] <= 0 {
		delete(counts, tenant)
	}
}

// tenantFull refuses a new session or one-shot past --tenant-max-sessions; m.mu is held.
func (m *Manager) tenantFull(tenant string) error {
	max := m.cfg.TenantMaxSessions
	if max <= 0 {
		return nil
	}
	n := m.tenants.starting[tenant]
	for _, s := range m.sessions {
		if s.tenant == tenant {
			n++
		}
	}
	if n >= max {
		return fmt.Errorf("you have %d sessions (one-shot executions count too), this server's maximum per API key "+
			"(--tenant-max-sessions): end one (DELETE /v1/sessions/{id}) or retry later: %w", max, errdefs.ErrResourceExhausted)
	}
	return nil
}

// lookupRun finds a session of ctx's tenant for an execution or a command (kind) and takes
// one of the tenant's runs (see takeRun); done gives it back.
func (m *Manager) lookupRun(ctx context.Context, id, kind string) (_ *Session, done func(), _ error) {
	s, err := m.lookup(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	done, err = m.takeRun(s.tenant, kind)
	if err != nil {
		return nil, nil, err
	}
	return s, done, nil
}

// takeRun counts an execution or a command of tenant, refusing it past
// --tenant-max-executions; done gives it back.
func (m *Manager) takeRun(tenant, kind string) (done func(), _ error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if max := m.cfg.TenantMaxExecutions; max > 0 && m.tenants.running[tenant] >= max {
		return nil, fmt.Errorf("you run %d executions and commands at once, this server's maximum per API key "+
			"(--tenant-max-executions): wait for one to finish or retry later: %w", max, errdefs.ErrResourceExhausted)
	}
	m.tenants.running[tenant]++
	m.metrics.runs.WithLabelValues(tenant, kind).Inc()
	return func() {
		m.mu.Lock()
		decr(m.tenants.running, tenant)
		m.mu.Unlock()
	}, nil
}

// Owner returns the tenant of the live session id. It is only for a front door that
// authenticates a request by a credential of the session itself (a per-session token, as
// E2B's sandbox traffic carries) instead of by an API key: having checked that credential,
// it calls the Manager as the session's owner, with WithTenant(ctx, tenant). No call of the
// API (REST, MCP, the SDK) answers with it: it reveals nothing to the API's callers, who
// still find only their own tenant's sessions.
func (m *Manager) Owner(id string) (tenant string, ok bool) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	m.mu.Unlock()
	if !ok {
		return "", false
	}
	return s.tenant, true
}
