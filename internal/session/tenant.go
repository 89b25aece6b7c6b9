package session

import "context"

// A tenant owns sessions: the name of the API key a request came with, or "" on a server
// without keys (and for cellbox's own callers: run, repl, chat, mcp on stdio).

type tenantKey struct{}

// WithTenant returns ctx for calls on behalf of tenant. The Manager's calls with it find,
// list, end and run in that tenant's sessions only, and count against its caps. A context
// without a tenant is the tenant "", which sees only the sessions created without one.
func WithTenant(ctx context.Context, tenant string) context.Context {
	return context.WithValue(ctx, tenantKey{}, tenant)
}

// Tenant returns the tenant of ctx; "" when it has none.
func Tenant(ctx context.Context) string {
	t, _ := ctx.Value(tenantKey{}).(string)
	return t
}
