// Package server wires one cellbox server together: config → sandbox backend → workspace
// store → session manager → HTTP handler and listener. The serve and run commands and the
// end-to-end tests all start a server through it.
//
// Not for: any behaviour of its own; each part lives in its package.
package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/agent"
	"github.com/cellbox/cellbox/internal/artifacts"
	"github.com/cellbox/cellbox/internal/auth"
	"github.com/cellbox/cellbox/internal/cluster"
	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/conversation"
	"github.com/cellbox/cellbox/internal/e2b"
	"github.com/cellbox/cellbox/internal/guestbin"
	"github.com/cellbox/cellbox/internal/httpapi"
	"github.com/cellbox/cellbox/internal/image"
	"github.com/cellbox/cellbox/internal/jupyter"
	"github.com/cellbox/cellbox/internal/listen"
	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/mcpserver"
	"github.com/cellbox/cellbox/internal/move"
	"github.com/cellbox/cellbox/internal/openai"
	"github.com/cellbox/cellbox/internal/sandbox"
	"github.com/cellbox/cellbox/internal/sandbox/docker"
	"github.com/cellbox/cellbox/internal/sandbox/local"
	"github.com/cellbox/cellbox/internal/sandbox/runc"
	"github.com/cellbox/cellbox/internal/session"
	"github.com/cellbox/cellbox/internal/tool"
	"github.com/cellbox/cellbox/internal/web"
	"github.com/cellbox/cellbox/internal/workspace"
)

// Server is a running cellbox server.
type Server struct {
	Manager *session.Manager
	// Backend runs the sandboxes; its Capabilities say what it enforces.
	Backend sandbox.Backend
	// MCP serves the tools over MCP: at /mcp, and on stdio for cellbox mcp.
	MCP *mcpserver.Server
	// URL is where the REST API listens, e.g. http://127.0.0.1:8080; "" with NoListen.
	URL string
	// PythonURL is the python tool server's SSE endpoint (--python-tool-addr); "": none.
	PythonURL string
	http      *http.Server     // nil with NoListen
	python    *http.Server     // the python tool server's; nil: none
	cluster   *cluster.Cluster // nil unless --cluster
	drain     *move.Drainer    // with cluster
	jupyter   *jupyter.Handler // nil with --no-jupyter
	unpeer    func()           // takes the cluster's nodes off the egress gateway's list of listeners
	unlock    func()           // of the state dir
}

// Options are what the config does not say.
type Options struct {
	// GuestBinary is the cellbox binary the sandboxes run as their guest; default: this
	// program's own binary.
	GuestBinary string
	Logger      *slog.Logger
	// Quiet drops the local-unsafe warning on stderr (the log still has it).
	Quiet bool
	// NoListen starts no HTTP server: the caller uses Manager and MCP in process.
	NoListen bool
	// Keys are the API keys the HTTP API requires (auth.Load); nil: none, and then Start
	// refuses an --addr beyond loopback unless --insecure-no-auth.
	Keys *auth.Keys
	// ClusterSecret is the secret the nodes of a cluster share to move sessions between
	// them when a node is drained ($CELLBOX_CLUSTER_SECRET); "": sessions do not move.
	ClusterSecret string
}

// NewLogger returns the text logger on stderr at the given level name.
func NewLogger(level string) *slog.Logger {
	var l slog.Level
	l.UnmarshalText([]byte(level))
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// NewBackend builds the configured sandbox backend.
func NewBackend(cfg config.Config, opts Options) (sandbox.Backend, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	exe, carried := opts.GuestBinary, ""
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find the cellbox binary: %w", err)
		}
		// The guest's own binary, when the build attached it (scripts/build.sh): sandboxes
		// run it rather than the whole of cellbox, ~2 MiB less memory each.
		if carried, err = guestbin.Extract(exe, filepath.Join(cfg.StateDir, "guest")); err != nil {
			log.Warn("the guest binary this cellbox carries could not be written out: sandboxes run cellbox itself", "error", err)
		} else if carried != "" {
			exe = carried
		}
	}
	exe, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return nil, fmt.Errorf("find the cellbox binary: %w", err)
	}
	images := image.NewStore(cfg.Images(), "")
	switch cfg.Backend {
	case "runc":
		rc := runc.Config{
			Runtime:        cfg.Runtime,
			StateDir:       filepath.Join(cfg.StateDir, "runc"),
			GuestBinary:    exe,
			Guests:         filepath.Join(cfg.StateDir, "guest"),
			CgroupParent:   cfg.CgroupParent,
			GVisorPlatform: cfg.GVisorPlatform,
			CRIU:           cfg.CRIU,
			Logger:         log,
		}
		if cfg.RootFS == "image" {
			rc.Images = images
		} else {
			rc.MPLCache = fontCache(cfg, log)
		}
		if !cfg.NoKernelTemplates {
			rc.Kernels = &runc.Kernels{Python: cfg.Python, Preimport: cfg.Preimport, Detach: []string{workspacesDir(cfg)}}
		}
		return runc.New(rc)
	case "docker":
		dc := docker.Config{
			Host:        cfg.DockerHost,
			StateDir:    filepath.Join(cfg.StateDir, "docker"),
			GuestBinary: cmp.Or(cfg.GuestBinary, carried),
			Images:      images,
			Logger:      log,
		}
		if cfg.Runtime != "runc" { // runc: the engine's default
			dc.Runtime = cfg.Runtime
		}
		if dc.GuestBinary == "" && runtime.GOOS == "linux" {
			dc.GuestBinary = exe
		}
		return docker.New(dc)
	case "local-unsafe":
		if !opts.Quiet {
			fmt.Fprintln(os.Stderr, "cellbox: WARNING: backend local-unsafe isolates NOTHING: code runs as this user, with this machine's files and network. Use it for development only.")
		}
		return local.New(local.Config{GuestBinary: exe, Logger: log})
	}
	return nil, fmt.Errorf("unknown backend %q", cfg.Backend)
}

// prepareImages makes the default image and those with warm pools ready in the backend
// (the docker backend imports them from the image store), or fails with the command that
// builds the one missing.
func prepareImages(ctx context.Context, cfg config.Config, backend sandbox.Backend) error {
	p, ok := backend.(interface {
		PrepareImage(ctx context.Context, name string) error
	})
	if !ok {
		return nil
	}
	names := []string{cfg.DefaultImage()}
	for name := range cfg.Pools() {
		if name != cfg.DefaultImage() {
			names = append(names, name)
		}
	}
	for _, name := range names {
		if name == "" {
			continue
		}
		if err := p.PrepareImage(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

// fontCache builds matplotlib's font cache once (see prepareFontCache).
func fontCache(cfg config.Config, log *slog.Logger) string {
	dir, err := prepareFontCache(context.Background(), cfg.Python, filepath.Join(cfg.StateDir, "mplcache"))
	if err != nil {
		log.Warn("could not build matplotlib's font cache; each sandbox will build its own", "err", err)
		return ""
	}
	return dir
}

// Start locks cfg.StateDir (an error matching ErrStateDirInUse when another server holds
// it), wires config → backend → workspaces → manager → MCP and HTTP and, unless NoListen,
// starts listening on cfg.Addr (port 0 picks a free one; see URL). The lock is held until
// Shutdown.
func Start(ctx context.Context, cfg config.Config, opts Options) (_ *Server, err error) {
	log := opts.Logger
	if log == nil {
		log = NewLogger(cfg.LogLevel)
		opts.Logger = log
	}
	if !opts.NoListen && opts.Keys.Len() == 0 && !cfg.InsecureNoAuth && !loopbackAddr(cfg.Addr) {
		return nil, fmt.Errorf("--addr %s can be reached from other machines, and no API keys are configured: anyone who reaches it could run code here. "+
			"Set CELLBOX_API_KEYS=KEY[,KEY...] or give --api-keys FILE (make a key with: cellbox keygen), or listen on 127.0.0.1, "+
			"or, only if something in front of cellbox authenticates, pass --insecure-no-auth", cfg.Addr)
	}
	if !opts.NoListen && cfg.PythonToolAddr != "" && !cfg.InsecureNoAuth && !loopbackAddr(cfg.PythonToolAddr) {
		return nil, fmt.Errorf("--python-tool-addr %s can be reached from other machines, and the python tool server takes no API key (vLLM sends none): "+
			"listen on 127.0.0.1, or, only if the network lets nothing but vLLM reach it, pass --insecure-no-auth", cfg.PythonToolAddr)
	}
	if cfg.Cluster != "" && cfg.ClusterNode == "" {
		// Before the manager: the node's name is in every session id.
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--cluster-node not given, and no host name: %w", err)
		}
		cfg.ClusterNode = strings.ToLower(h)
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	unlock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			unlock()
		}
	}()
	backend, err := NewBackend(cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := prepareImages(ctx, cfg, backend); err != nil {
		if c, ok := backend.(io.Closer); ok {
			c.Close()
		}
		return nil, err
	}
	quota := cfg.Quota
	if cfg.Backend == "local-unsafe" && quota == "auto" {
		quota = "none" // a loop mount needs root, which local-unsafe is meant to do without
	}
	store, err := workspace.NewStore(workspace.StoreConfig{Dir: workspacesDir(cfg), Logger: log, Quota: quota})
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := session.New(ctx, cfg, backend, store, log, reg)
	if err != nil {
		return nil, err
	}
	s := &Server{
		Manager: m,
		Backend: backend,
		MCP: mcpserver.New(m, mcpserver.Options{
			Logger:         log,
			TimeoutS:       cfg.ExecTimeout.Seconds(),
			MemoryMB:       cfg.MemoryMB,
			Languages:      config.SplitList(cfg.ToolLanguages),
			SessionTimeout: cfg.IdleTimeout,
			IDPrefix:       cfg.SessionIDPrefix(),
		}),
		unlock: unlock,
	}
	if opts.NoListen {
		return s, nil
	}
	ln, err := listen.TCP("this cellbox server's API", cfg.Addr)
	if err != nil {
		m.Shutdown(ctx)
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	loopback := ln.Addr().(*net.TCPAddr).IP.IsLoopback()
	switch {
	case opts.Keys.Len() > 0:
		log.Info("API keys required", "keys", opts.Keys.Len())
	case !loopback:
		log.Warn("NO AUTHENTICATION (--insecure-no-auth): anyone who can reach this address can run code here", "addr", ln.Addr().String())
	}
	var front httpapi.FrontDoor
	if !cfg.NoE2B {
		e, err := e2b.New(m, e2b.Options{Elsewhere: httpapi.Elsewhere, StateDir: cfg.StateDir, MaxBodyBytes: cfg.MaxBodyBytes, MaxUploadBytes: cfg.MaxUploadBytes,
			MaxExecTimeout: cfg.MaxExecTimeout, MaxIdleTimeout: cfg.MaxIdleTimeout, Logger: log})
		if err != nil {
			ln.Close()
			m.Shutdown(ctx)
			return nil, err
		}
		front = e
	}
	jup, err := newJupyter(cfg, m, opts.ClusterSecret, log)
	if err != nil {
		ln.Close()
		m.Shutdown(ctx)
		return nil, err
	}
	var jupDoor httpapi.FrontDoor
	if jup != nil {
		jupDoor = jup
		s.jupyter = jup
	}
	var oai http.Handler
	if !cfg.NoOpenAI {
		o, err := openai.New(m, openai.Options{StateDir: cfg.StateDir, MaxBodyBytes: cfg.MaxBodyBytes, MaxUploadBytes: cfg.MaxUploadBytes,
			MaxMemoryMB: cfg.MaxMemoryMB, MaxIdleTimeout: cfg.MaxIdleTimeout, Logger: log,
			Responses: openai.ResponsesOptions{NewProvider: providers(cfg), Runner: m},
			IDPrefix:  cfg.SessionIDPrefix(), Elsewhere: httpapi.Elsewhere,
			BaseURL: func(r *http.Request) string { return httpapi.BaseURL(cfg.PublicURL, r) }, ElsewhereFiles: httpapi.ElsewhereItems, OpenOnNode: httpapi.OpenOnNode})
		if err != nil {
			ln.Close()
			m.Shutdown(ctx)
			return nil, err
		}
		oai = o
	}
	if cfg.ArtifactsStore != "" {
		store, err := artifacts.Open(ctx, cfg.ArtifactsStore, artifacts.Options{PublicURL: cfg.ArtifactsPublicURL,
			SpoolDir: filepath.Join(cfg.StateDir, "artifacts-spool")})
		if err != nil {
			ln.Close()
			m.Shutdown(ctx)
			return nil, err
		}
		m.UseArtifacts(store, cfg.ArtifactsTTL)
		log.Info("artifacts store", "store", cfg.ArtifactsStore, "public_url", cfg.ArtifactsPublicURL)
	}
	convs, err := conversation.New(conversation.Options{Sessions: m, NewProvider: providers(cfg), Logger: log,
		Tools: toolOptions(cfg), Dir: filepath.Join(cfg.StateDir, "conversations"),
		IDPrefix: cfg.SessionIDPrefix()})
	if err != nil {
		ln.Close()
		m.Shutdown(ctx)
		return nil, err
	}
	if cfg.Cluster != "" {
		s.drain = &move.Drainer{M: m, Secret: opts.ClusterSecret, Log: log, Client: &http.Client{}}
		if s.cluster, err = joinCluster(ctx, cfg, ln.Addr(), m, s.drain, log); err != nil {
			ln.Close()
			m.Shutdown(ctx)
			return nil, err
		}
		s.unpeer = listen.Peers(nodeSockets(s.cluster.Members))
	}
	var routes httpapi.Cluster
	var moves *move.Verifier
	if s.cluster != nil {
		routes = s.cluster
		if opts.ClusterSecret != "" {
			// The nonces of the moves taken, kept until they expire: a replay is refused after
			// a restart too.
			if moves, err = move.NewVerifier(opts.ClusterSecret, s.cluster.Name(), filepath.Join(cfg.StateDir, "cluster", "move-nonces")); err != nil {
				s.cluster.Close()
				ln.Close()
				m.Shutdown(ctx)
				return nil, err
			}
		}
	}
	h := httpapi.New(m, httpapi.Options{
		MaxBodyBytes:   cfg.MaxBodyBytes,
		MaxUploadBytes: cfg.MaxUploadBytes,
		Logger:         log,
		Gatherer:       reg,
		MCP:            s.MCP.Handler(),
		MCPSSE:         s.MCP.SSE(),
		LoopbackOnly:   loopback,
		Keys:           opts.Keys,
		MetricsPublic:  cfg.MetricsPublic,
		E2B:            front,
		Jupyter:        jupDoor,
		OpenAI:         oai,
		Tools:          toolOptions(cfg),
		NewProvider:    providers(cfg),
		Providers:      func() []api.Provider { return providerList(cfg) },
		Conversations:  convs,
		Web:            webPage(cfg),
		Cluster:        routes,
		Moves:          moves,
		Tenants:        knownTenant(cfg, opts.Keys),
		LinkKeys:       filepath.Join(cfg.StateDir, "links"),
		PublicURL:      cfg.PublicURL,
	})
	if cfg.PythonToolAddr != "" {
		pl, err := listen.TCP("this cellbox server's python tool server", cfg.PythonToolAddr)
		if err != nil {
			ln.Close()
			m.Shutdown(ctx)
			return nil, fmt.Errorf("listen on %s (--python-tool-addr): %w", cfg.PythonToolAddr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("/sse", mcpserver.NewPython(m, mcpserver.PythonOptions{Tenant: cfg.PythonToolTenant, Logger: log}))
		s.python = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		s.PythonURL = "http://" + pl.Addr().String() + "/sse"
		log.Info("python tool server (gpt-oss's python tool, MCP over HTTP+SSE)", "url", s.PythonURL, "tenant", cfg.PythonToolTenant)
		go func() {
			if err := s.python.Serve(pl); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("python tool server", "err", err)
			}
		}()
	}
	s.http = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	s.URL = "http://" + ln.Addr().String()
	go func() {
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server", "err", err)
		}
	}()
	return s, nil
}

// knownTenant reports whether a tenant exists on this server: an API key's name, the
// python tool server's tenant, or, on a server without keys, the keyless tenant.
func knownTenant(cfg config.Config, keys *auth.Keys) func(string) bool {
	return func(name string) bool {
		switch {
		case cfg.PythonToolAddr != "" && name == cfg.PythonToolTenant:
			return true
		case keys.Len() == 0:
			return name == ""
		}
		return keys.Has(name)
	}
}

// joinCluster registers this server as a node of the cluster on Kubernetes (package
// cluster) and watches the others.
func joinCluster(ctx context.Context, cfg config.Config, addr net.Addr, m *session.Manager, d *move.Drainer, log *slog.Logger) (*cluster.Cluster, error) {
	kube, err := cluster.KubeConfig(cfg.Kubeconfig)
	if err != nil {
		return nil, err
	}
	ns := cfg.ClusterNamespace
	if ns == "" {
		ns = cluster.Namespace()
	}
	u, err := clusterURL(cfg.ClusterURL, addr)
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The drain is told of a cordon only once the cluster it drains into is there.
	ready := make(chan struct{})
	cordoned := func(on bool) {
		<-ready
		d.Cordoned(on)
	}
	c, err := cluster.Start(sctx, cluster.Config{Kube: kube, Namespace: ns, Node: cfg.ClusterNode, URL: u,
		LeaseDuration: cfg.ClusterLeaseDuration, Logger: log, MovedIn: m.MovedIn, Cordoned: cordoned, Secret: d.Secret,
		Load: func() cluster.Load {
			n, warm := m.Stats()
			return cluster.Load{Sessions: n, Room: max(cfg.MaxSessions-n, 0), Warm: warm}
		}})
	if err != nil {
		return nil, fmt.Errorf("join the cluster: %w", err)
	}
	d.C = c
	close(ready)
	log.Info("cluster node registered", "node", cfg.ClusterNode, "namespace", ns, "url", u.String(), "session_id_prefix", c.Tag())
	return c, nil
}

// nodeSockets lists the API of each node of the cluster (this one too, at the URL the others
// use) as a listener sessions must not reach: the cluster's routes and moves are there. A
// node whose URL names a host rather than an address is left out: the gateway would have to
// resolve it on every decision (docs/security.md, "Not defended yet").
func nodeSockets(members func() []cluster.Member) func() []listen.Socket {
	return func() []listen.Socket {
		var out []listen.Socket
		for _, m := range members() {
			if m.URL == nil {
				continue
			}
			a, err := netip.ParseAddr(strings.Trim(m.URL.Hostname(), "[]"))
			if err != nil {
				continue
			}
			port := m.URL.Port()
			if port == "" {
				port = map[string]string{"http": "80", "https": "443"}[m.URL.Scheme]
			}
			p, err := strconv.ParseUint(port, 10, 16)
			if err != nil {
				continue
			}
			out = append(out, listen.Socket{Addr: netip.AddrPortFrom(a.Unmap(), uint16(p)), Name: "cellbox node " + m.Name + "'s API"})
		}
		return out
	}
}

// clusterURL is where the other nodes reach this one: --cluster-url, else the address
// listened on, unless that is a wildcard (0.0.0.0 says nothing of where to connect).
func clusterURL(flag string, addr net.Addr) (*url.URL, error) {
	if flag != "" {
		_, rest, _ := strings.Cut(flag, "://")
		if host, _, _ := strings.Cut(rest, "/"); strings.Count(host, ":") > 1 && !strings.HasPrefix(host, "[") {
			return nil, fmt.Errorf("--cluster-url %.200q: an IPv6 address goes in brackets, e.g. http://[fd00::7]:8080", flag)
		}
		u, err := url.Parse(flag)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			return nil, fmt.Errorf("--cluster-url %.200q: give the base URL the other nodes reach this one at, e.g. http://10.0.0.7:8080", flag)
		}
		u.Path = ""
		return u, nil
	}
	ta, ok := addr.(*net.TCPAddr)
	if !ok || ta.IP.IsUnspecified() {
		return nil, fmt.Errorf("listening on %s, a wildcard address: give --cluster-url, the URL the other nodes reach this one at (in a pod: http://$(POD_IP):PORT)", addr)
	}
	return &url.URL{Scheme: "http", Host: ta.String()}, nil
}

// loopbackAddr reports whether a listen address is on loopback only. An address that does
// not parse is left to net.Listen to refuse.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return true
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// providers returns the model providers of POST /v1/agent: by name, "" for --provider.
// --model and --base-url apply to that provider only; the others use their variables
// (OPENAI_BASE_URL, ...). Each request reads the environment afresh.
func providers(cfg config.Config) func(string) (llm.Provider, string, error) {
	return func(name string) (llm.Provider, string, error) {
		def := cfg.Provider
		if def == "" {
			def = agent.DefaultProvider() // the environment may change while the server runs
		}
		if name == "" || name == def {
			return agent.NewProvider(agent.ProviderConfig{Name: def, Model: cfg.Model, BaseURL: cfg.BaseURL})
		}
		return agent.NewProvider(agent.ProviderConfig{Name: name})
	}
}

// webPage is the browser page, unless --no-web.
func webPage(cfg config.Config) http.Handler {
	if cfg.NoWeb {
		return nil
	}
	return web.Handler()
}

// providerList is what GET /v1/providers says: the providers that can be set up (a key in
// the environment, ...), each with its default model. openai-responses takes openai's key
// and base URL, so it is listed only when --provider names it.
func providerList(cfg config.Config) []api.Provider {
	newProvider := providers(cfg)
	def, _, defErr := newProvider("")
	list := []api.Provider{}
	names := []string{api.ProviderOpenAI, api.ProviderAnthropic}
	if cfg.Provider == api.ProviderOpenAIResponses {
		names = []string{api.ProviderOpenAI, api.ProviderOpenAIResponses, api.ProviderAnthropic}
	}
	for _, name := range names {
		p, model, err := newProvider(name)
		if err != nil {
			continue
		}
		list = append(list, api.Provider{Name: p.Name(), DefaultModel: model, Models: []string{model},
			Default: defErr == nil && def.Name() == p.Name()})
	}
	return list
}

// Shutdown interrupts running cells, stops every sandbox, closes the listener and the MCP
// connections once the running requests have their answers, and unlocks the state dir;
// workspaces are kept.
func (s *Server) Shutdown(ctx context.Context) error {
	defer s.unlock()
	var errs []error
	if s.cluster != nil {
		// First, so the other nodes send nothing new here and answer this node's sessions
		// "restarting" while it is away; watching the others ends last, as requests still
		// running may be forwarded ones.
		s.drain.Close()
		errs = append(errs, s.cluster.Leave(ctx))
		defer s.cluster.Close()
		defer s.unpeer()
	}
	// Stop taking requests, but let running ones end: the manager interrupts their cells.
	s.MCP.Close()
	if s.jupyter != nil {
		s.jupyter.Close() // its websockets are hijacked connections, which the HTTP server's shutdown leaves open
	}
	if s.python != nil {
		// Its event streams stay open until their clients go: close, don't wait.
		s.python.Close()
	}
	done := make(chan error, 1)
	go func() {
		if s.http == nil {
			done <- nil
			return
		}
		done <- s.http.Shutdown(ctx)
	}()
	errs = append(errs, s.Manager.Shutdown(ctx))
	if c, ok := s.Backend.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	return errors.Join(append(errs, <-done)...)
}

// workspacesDir is the workspaces' folder in the state folder.
func workspacesDir(cfg config.Config) string { return filepath.Join(cfg.StateDir, "workspaces") }

// toolOptions are the tool set's options of cfg: the limits its descriptions state, and the
// languages it offers.
func toolOptions(cfg config.Config) tool.Options {
	return tool.Options{TimeoutS: cfg.ExecTimeout.Seconds(), MemoryMB: cfg.MemoryMB, Languages: config.SplitList(cfg.ToolLanguages)}
}
