// Package config is cellbox's one Config: every setting of the server and the CLI, its
// default, and how it is loaded — a JSON file, then CELLBOX_* environment variables, then
// flags, each overriding the one before — and checked (Validate).
//
// Not for: per-request values (those are api types, capped by these settings).
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/cellbox/cellbox/api"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cellbox/cellbox/internal/image"
)

// Config holds every setting. Field comments name the flag.
type Config struct {
	Addr      string // --addr
	Backend   string // --backend: runc | docker | local-unsafe
	Runtime   string // --runtime: OCI runtime: runc's binary (runc, crun, runsc), or the Docker engine's name of one
	StateDir  string // --state-dir
	Python    string // --python: interpreter inside the sandbox
	Preimport string // --preimport: Python run when a kernel starts
	// ToolLanguages: the languages whose tools the model is offered beside python and shell
	// (javascript, typescript, r, bash); comma-separated.
	ToolLanguages string // --tool-languages
	PoolSize      int    // --pool-size: warm sandboxes of the default image
	// PoolMax: how far each warm pool (--pool-size, --image-pools, --language-pools) may grow
	// past its size when sessions come in bursts; its size is its floor.
	PoolMax int // --pool-max
	// CgroupParent: runc makes each sandbox's cgroup in this one; relative: under the
	// server's cgroup; absolute: from the root, outside it (sandboxes outlive a container).
	// Empty: the backend's default (runc.DefaultCgroupParent).
	CgroupParent string // --cgroup-parent
	// GVisorPlatform: runc with runsc: gVisor's platform, auto | systrap | kvm | ptrace.
	GVisorPlatform string // --gvisor-platform
	// CRIU: runc checkpoints sandboxes (pause, fork) with this CRIU binary; "": criu in PATH.
	CRIU string // --criu
	// NoKernelTemplates: runc starts every kernel afresh instead of forking it from a
	// kernel template per root filesystem (package template).
	NoKernelTemplates bool // --no-kernel-templates

	// Images (package image): what sandboxes run on. DefaultImage says which one sessions
	// get when they name none; Pools how many warm sandboxes each image keeps.
	Image      string // --image: the image of sessions that name none
	RootFS     string // --rootfs: host | image: what runc sandboxes run on
	ImagePools string // --image-pools: NAME=N,...: warm sandboxes of images other than the default
	// LanguagePools: LANG=N,...: warm sandboxes of the default image whose kernel of that
	// language (javascript, r, bash) runs already, for sessions of the language.
	LanguagePools string // --language-pools
	ImagesDir     string // --images-dir: where built images are ("": <state-dir>/images, where cellbox image build puts them)

	// The docker backend: the engine's address ("": DOCKER_HOST, else the default socket), and
	// the Linux cellbox binary that runs inside its containers ("": this one, on Linux).
	DockerHost  string // --docker-host
	GuestBinary string // --guest-binary

	// EndSessionsOnExit: the server ends every session when it stops, and at start those an
	// earlier process left. Off (the default for serve), sessions outlive a restart.
	EndSessionsOnExit bool // --end-sessions-on-exit

	MaxSessions int // --max-sessions

	// API keys: with any, every call but /healthz needs one, and each key is a tenant that
	// sees only its own sessions. The keys themselves come from the file and from the
	// variable CELLBOX_API_KEYS (comma-separated), never from a flag or the config file.
	APIKeysFile    string // --api-keys: file of keys, one a line, each optionally followed by its tenant's name
	InsecureNoAuth bool   // --insecure-no-auth: allow listening beyond loopback without keys
	MetricsPublic  bool   // --metrics-public: /metrics without a key even when keys are configured
	PublicURL      string // --public-url: the scheme and host of the links the server signs; "": each request's
	// Artifacts: --artifacts-store (s3://BUCKET/PREFIX or azblob://CONTAINER/PREFIX; "":
	// none), --artifacts-public-url (plain URLs, for a public bucket) and --artifacts-ttl
	// (how long a presigned URL lives).
	ArtifactsStore     string
	ArtifactsPublicURL string
	ArtifactsTTL       time.Duration
	NoE2B              bool // --no-e2b: do not serve the E2B-compatible API
	NoOpenAI           bool // --no-openai: do not serve OpenAI's Containers and Files APIs
	NoJupyter          bool // --no-jupyter: do not serve Jupyter's kernel API (/api/kernels)
	// JupyterOpenChannels: a Jupyter kernel's websocket may come without a key, its kernel
	// id the credential (--jupyter-open-channels; see package jupyter).
	JupyterOpenChannels bool
	NoWeb               bool // --no-web: do not serve the web page at /
	// The python tool server (gpt-oss's built-in python tool for vLLM's --tool-server):
	// MCP over HTTP+SSE at /sse on a listener of its own, without keys (vLLM sends none).
	PythonToolAddr      string // --python-tool-addr: "" (none) or host:port
	PythonToolTenant    string // --python-tool-tenant: the tenant its sessions belong to
	TenantMaxSessions   int    // --tenant-max-sessions: sessions (and one-shots) per tenant; 0: only --max-sessions
	TenantMaxExecutions int    // --tenant-max-executions: executions and commands at once per tenant; 0: no cap

	// Egress (package egress): what code in sandboxes reaches, through the server's gateway.
	// A policy flag is none | public | allowlist:ENTRY,ENTRY,... (see api.Network).
	Egress             string // --egress: the policy of sessions that ask for none
	EgressMax          string // --egress-max: the most a session may ask for
	EgressDeny         string // --egress-deny: ENTRY,...: refused to every session
	EgressPrivateAllow string // --egress-private-allow: CIDR,...: private addresses that may be reached after all
	EgressAllowServer  string // --egress-allow-server: ADDR:PORT,...: the server's listeners sessions may reach after all
	EgressDNS          string // --egress-dns: host:port of the resolver the gateway uses ("": the system's)
	EgressRoots        string // --egress-roots: PEM file of roots trusted for intercepted upstreams, beside the system's
	EgressTenants      string // --egress-tenants: JSON file of per-tenant limits, policies and named secrets
	EgressMaxConns     int    // --egress-max-conns: connections open at once per session
	EgressQuotaMB      int    // --egress-quota-mb: bytes both ways per session (MiB); 0: none
	EgressRateKiB      int    // --egress-rate-kib: bandwidth per session (KiB/s); 0: none

	MemoryMB    int     // --memory-mb: default per session
	CPUs        float64 // --cpus
	Pids        int     // --pids
	DiskMB      int     // --disk-mb
	TmpMB       int     // --tmp-mb
	MaxMemoryMB int     // --max-memory-mb: the most a request may ask for
	MaxCPUs     float64 // --max-cpus
	MaxPids     int     // --max-pids
	MaxDiskMB   int     // --max-disk-mb

	ExecTimeout    time.Duration // --exec-timeout: default for one execution
	MaxExecTimeout time.Duration // --max-exec-timeout
	InterruptGrace time.Duration // --interrupt-grace: then the kernel is killed and restarted
	IdleTimeout    time.Duration // --idle-timeout
	MaxIdleTimeout time.Duration // --max-idle-timeout
	MaxLifetime    time.Duration // --max-lifetime: longest lifetime a session may ask for (lifetime_s)
	Retention      time.Duration // --retention: how long a workspace is kept after its session
	// IdleAction is what the idle timeout does to a session that does not say (api.IdleActionEnd or Pause).
	IdleAction      string        // --idle-action
	PausedRetention time.Duration // --paused-retention: a session paused this long ends
	PausedQuotaMB   int64         // --paused-quota-mb: the disk all paused sessions' checkpoints may take

	MaxOutputBytes int   // --max-output-bytes: text per execution
	MaxRichBytes   int   // --max-rich-bytes: images, HTML... per execution
	MaxUploadBytes int64 // --max-upload-bytes: one file upload
	MaxBodyBytes   int64 // --max-body-bytes: a JSON request body

	Quota    string // --quota: auto | loop | none
	LogLevel string // --log-level: debug | info | warn | error

	// The model of the agent loop (cellbox chat, POST /v1/agent). API keys come from the
	// providers' own variables (OPENAI_API_KEY, ANTHROPIC_API_KEY), never from here.
	Provider string // --provider: openai | openai-responses | anthropic; "": whichever has an API key set
	Model    string // --model: "": the provider's default
	BaseURL  string // --base-url: the provider's API; "": its *_BASE_URL variable, else its own

	// Cluster: with "kubernetes", this server is one node of a cellbox cluster (package
	// cluster): it registers itself through the API server, and any node answers any
	// request, forwarding those of other nodes' sessions.
	Cluster              string        // --cluster: "" | kubernetes
	ClusterNode          string        // --cluster-node: this node's name ("": the host name)
	ClusterNamespace     string        // --cluster-namespace: where the nodes' Leases are ("": the pod's namespace, else default)
	ClusterURL           string        // --cluster-url: where the other nodes reach this one ("": the listen address, if not a wildcard)
	Kubeconfig           string        // --kubeconfig: "": in-cluster (the pod's service account)
	ClusterLeaseDuration time.Duration // --cluster-lease-duration: a node not heard from for this long is unavailable
}

// Default returns the defaults of DESIGN.md.
func Default() Config {
	return Config{
		Addr:            "127.0.0.1:8080",
		Backend:         "runc",
		Runtime:         "runc",
		GVisorPlatform:  "auto",
		StateDir:        defaultStateDir(),
		ArtifactsTTL:    24 * time.Hour,
		Python:          "/usr/bin/python3",
		Preimport:       "import numpy, pandas, matplotlib, matplotlib.pyplot",
		PoolSize:        2,
		PoolMax:         128,
		Image:           image.DefaultName,
		RootFS:          "host",
		MaxSessions:     100,
		Egress:          "none",
		EgressMax:       "public",
		EgressMaxConns:  32,
		EgressQuotaMB:   4096,
		MemoryMB:        1024,
		CPUs:            1,
		Pids:            256,
		DiskMB:          1024,
		TmpMB:           256,
		MaxMemoryMB:     8192,
		MaxCPUs:         float64(runtime.NumCPU()),
		MaxPids:         4096,
		MaxDiskMB:       16384,
		ExecTimeout:     60 * time.Second,
		MaxExecTimeout:  30 * time.Minute,
		InterruptGrace:  3 * time.Second,
		IdleTimeout:     20 * time.Minute,
		MaxIdleTimeout:  24 * time.Hour,
		MaxLifetime:     24 * time.Hour,
		Retention:       24 * time.Hour,
		IdleAction:      "end",
		PausedRetention: 7 * 24 * time.Hour,
		PausedQuotaMB:   20 << 10,
		MaxOutputBytes:  1 << 20,
		MaxRichBytes:    16 << 20,
		MaxUploadBytes:  1 << 30,
		MaxBodyBytes:    8 << 20,
		Quota:           "auto",
		LogLevel:        "info",

		ClusterLeaseDuration: 15 * time.Second,
	}
}

func defaultStateDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/cellbox"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "cellbox")
	}
	return filepath.Join(os.TempDir(), "cellbox")
}

// Flags binds every setting to a flag of fs. Call Load after fs is defined and before
// fs.Parse, so the file and the environment become the flags' defaults.
func (c *Config) Flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "addr", c.Addr, "address to listen on (host:port)")
	fs.StringVar(&c.Backend, "backend", c.Backend, "sandbox backend: runc | docker (a Docker engine, on images) | local-unsafe (no isolation, development only)")
	fs.StringVar(&c.Runtime, "runtime", c.Runtime, "OCI runtime: for runc its binary (runc, crun or runsc); for docker the engine's name of one (runsc, if the engine has it)")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "folder for workspaces and sandbox state")
	fs.StringVar(&c.Python, "python", c.Python, "Python interpreter inside the sandbox")
	fs.StringVar(&c.Preimport, "preimport", c.Preimport, "Python run when a kernel starts (warm imports)")
	fs.StringVar(&c.ToolLanguages, "tool-languages", c.ToolLanguages, "languages whose tools models are offered beside python and shell (MCP, /v1/tools, the agent): any of javascript, typescript, r, bash, comma-separated")
	fs.BoolVar(&c.NoKernelTemplates, "no-kernel-templates", c.NoKernelTemplates, "runc: start every kernel afresh (~1 s, ~80 MiB each) instead of forking it from a prepared template process (milliseconds, a few MiB)")
	fs.IntVar(&c.PoolSize, "pool-size", c.PoolSize, "sandboxes of the default image kept warm, ready for new sessions")
	fs.IntVar(&c.PoolMax, "pool-max", c.PoolMax, "how many warm sandboxes each pool may keep when sessions come in bursts: a pool grows to the most sessions asked of it within a second in the last 10 minutes, up to this, while the host has a quarter of its memory available; its size (--pool-size, --image-pools, --language-pools) is its floor, and 0 is none")
	fs.StringVar(&c.GVisorPlatform, "gvisor-platform", c.GVisorPlatform, "runc with --runtime runsc: gVisor's platform: auto (kvm where /dev/kvm works, else systrap), systrap, kvm or ptrace; with docker, the engine's runtimeArgs choose it")
	fs.StringVar(&c.CRIU, "criu", c.CRIU, "runc: the CRIU binary (4.2 or later) that checkpoints sandboxes, to pause and fork sessions (default: criu in PATH; scripts/criu.sh builds one)")
	fs.StringVar(&c.CgroupParent, "cgroup-parent", c.CgroupParent, "runc: the cgroup sandboxes' cgroups are made in (default cellbox): a relative one is under the server's own cgroup; an absolute one (/cellbox) is from the cgroup root, so that sandboxes outlive a container the server runs in")
	fs.StringVar(&c.Image, "image", c.Image, "the image of sessions that name none, built by cellbox image build NAME (runc runs on images with --rootfs image only)")
	fs.StringVar(&c.RootFS, "rootfs", c.RootFS, "what runc sandboxes run on: host (this machine's system folders) | image (built images; see --image)")
	fs.StringVar(&c.LanguagePools, "language-pools", c.LanguagePools, "warm sandboxes of the default image with a language's kernel running already, for sessions of that language: LANG=N,LANG=N (javascript, typescript, r, bash; TypeScript's is JavaScript's)")
	fs.StringVar(&c.ImagePools, "image-pools", c.ImagePools, "warm sandboxes of images other than the default: NAME=N,NAME=N (the default image's are --pool-size)")
	fs.StringVar(&c.ImagesDir, "images-dir", c.ImagesDir, "the folder of built images (default: the state dir's images/, where cellbox image build --state-dir puts them)")
	fs.StringVar(&c.DockerHost, "docker-host", c.DockerHost, "docker backend: the engine's address, e.g. unix:///var/run/docker.sock (default: DOCKER_HOST, else the engine's default socket)")
	fs.StringVar(&c.GuestBinary, "guest-binary", c.GuestBinary, "docker backend: a Linux cellbox binary for the engine's architecture, run inside the containers (default: this binary, on Linux; make build-linux builds them)")
	fs.BoolVar(&c.EndSessionsOnExit, "end-sessions-on-exit", c.EndSessionsOnExit, "end every session when the server stops (default: sessions live on, and the next server on this state dir takes them over)")
	fs.IntVar(&c.MaxSessions, "max-sessions", c.MaxSessions, "concurrent sessions; past it, resource_exhausted")
	fs.StringVar(&c.APIKeysFile, "api-keys", c.APIKeysFile, "file of API keys, one a line, each optionally followed by a tenant name (keys also come from $CELLBOX_API_KEYS, comma-separated); with keys, every call but /healthz needs one")
	fs.BoolVar(&c.InsecureNoAuth, "insecure-no-auth", c.InsecureNoAuth, "allow listening on an address beyond loopback without API keys (only behind something that authenticates)")
	fs.BoolVar(&c.MetricsPublic, "metrics-public", c.MetricsPublic, "serve /metrics without an API key even when keys are configured")
	fs.StringVar(&c.ArtifactsStore, "artifacts-store", c.ArtifactsStore, "keep every file code creates or changes in object storage, and give its URL in results: s3://BUCKET/PREFIX (endpoint, region and credentials from the AWS variables and files) or azblob://CONTAINER/PREFIX (AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY)")
	fs.StringVar(&c.ArtifactsPublicURL, "artifacts-public-url", c.ArtifactsPublicURL, "the URL the artifacts bucket's objects can be read at by anyone (e.g. https://artifacts.example.com/); results then give plain URLs, not presigned ones")
	fs.DurationVar(&c.ArtifactsTTL, "artifacts-ttl", c.ArtifactsTTL, "how long an artifact's presigned URL works (at most 168h)")
	fs.StringVar(&c.PublicURL, "public-url", c.PublicURL, "scheme and host that signed links to files point to, as clients reach this server (e.g. https://cellbox.example.com); default: the one each request came to")
	fs.BoolVar(&c.NoE2B, "no-e2b", c.NoE2B, "do not serve the E2B-compatible API (/sandboxes, and requests with an E2b-Sandbox-Id header)")
	fs.BoolVar(&c.NoOpenAI, "no-openai", c.NoOpenAI, "do not serve OpenAI's Containers and Files APIs (/v1/containers, /v1/files)")
	fs.BoolVar(&c.NoJupyter, "no-jupyter", c.NoJupyter, "do not serve Jupyter's kernel API (/api/kernels, /api/kernelspecs: the gateway that jupyter_server's --gateway-url uses)")
	fs.BoolVar(&c.JupyterOpenChannels, "jupyter-open-channels", c.JupyterOpenChannels, "let a Jupyter kernel's websocket come without an API key, its kernel id (shown only to its API key) the credential: for jupyter_server 1.x's gateway kernel manager (nbclient, papermill), which sends no token on the websocket")
	fs.BoolVar(&c.NoWeb, "no-web", c.NoWeb, "do not serve the web page (chat, notebook, sessions) at /")
	fs.StringVar(&c.PythonToolAddr, "python-tool-addr", c.PythonToolAddr, "also serve gpt-oss's python tool (MCP over HTTP+SSE at /sse, for vllm serve --tool-server HOST:PORT) on this address; it takes no API key, so keep it on loopback or a network only vLLM reaches (see docs/openai.md)")
	fs.StringVar(&c.PythonToolTenant, "python-tool-tenant", c.PythonToolTenant, "the tenant the python tool server's sessions belong to (a name of the keys file; default: the keyless tenant)")
	fs.IntVar(&c.TenantMaxSessions, "tenant-max-sessions", c.TenantMaxSessions, "concurrent sessions (and one-shot executions) per API key; 0: only --max-sessions")
	fs.IntVar(&c.TenantMaxExecutions, "tenant-max-executions", c.TenantMaxExecutions, "concurrent executions and commands per API key; 0: no cap")
	fs.StringVar(&c.Egress, "egress", c.Egress, "network egress of sessions that ask for none: none | public (every public address) | allowlist:ENTRY,... (domains, *.wildcards, IPs, CIDRs, each with an optional :port)")
	fs.StringVar(&c.EgressMax, "egress-max", c.EgressMax, "the widest egress a session may ask for (same form as --egress)")
	fs.StringVar(&c.EgressDeny, "egress-deny", c.EgressDeny, "ENTRY,...: destinations refused to every session, whatever it asks")
	fs.StringVar(&c.EgressPrivateAllow, "egress-private-allow", c.EgressPrivateAllow, "CIDR,...: private or loopback addresses sessions may reach after all (an internal package mirror); never the cloud's host agents nor the server's own listeners")
	fs.StringVar(&c.EgressAllowServer, "egress-allow-server", c.EgressAllowServer, "ADDR:PORT,...: listeners of this server (its API, ...) sessions may reach after all, each by its exact address and port; with --egress-private-allow for a private or loopback address. Code in a sandbox then calls cellbox itself: see docs/egress.md")
	fs.StringVar(&c.EgressDNS, "egress-dns", c.EgressDNS, "host:port of the DNS server the egress gateway resolves names with (default: the system's)")
	fs.StringVar(&c.EgressRoots, "egress-roots", c.EgressRoots, "PEM file of certificate authorities the gateway trusts, beside the system's, when it verifies an upstream whose TLS it terminates (a domain with a secret); for an internal CA")
	fs.StringVar(&c.EgressTenants, "egress-tenants", c.EgressTenants, "JSON file of per-tenant egress: the widest and the default policy, named secrets, connection, byte and bandwidth limits (see docs/egress.md)")
	fs.IntVar(&c.EgressMaxConns, "egress-max-conns", c.EgressMaxConns, "egress connections open at once per session")
	fs.IntVar(&c.EgressQuotaMB, "egress-quota-mb", c.EgressQuotaMB, "egress bytes per session, both ways (MiB); then connections are refused; 0: no quota")
	fs.IntVar(&c.EgressRateKiB, "egress-rate-kib", c.EgressRateKiB, "egress bandwidth per session, both ways together (KiB/s); 0: no cap")
	fs.IntVar(&c.MemoryMB, "memory-mb", c.MemoryMB, "default memory limit per session (MiB)")
	fs.Float64Var(&c.CPUs, "cpus", c.CPUs, "default CPU limit per session (cores)")
	fs.IntVar(&c.Pids, "pids", c.Pids, "default process limit per session")
	fs.IntVar(&c.DiskMB, "disk-mb", c.DiskMB, "default workspace disk quota per session (MiB)")
	fs.IntVar(&c.TmpMB, "tmp-mb", c.TmpMB, "size of each sandbox's /tmp (MiB)")
	fs.IntVar(&c.MaxMemoryMB, "max-memory-mb", c.MaxMemoryMB, "most memory a session may ask for (MiB)")
	fs.Float64Var(&c.MaxCPUs, "max-cpus", c.MaxCPUs, "most CPUs a session may ask for")
	fs.IntVar(&c.MaxPids, "max-pids", c.MaxPids, "most processes a session may ask for")
	fs.IntVar(&c.MaxDiskMB, "max-disk-mb", c.MaxDiskMB, "most workspace disk a session may ask for (MiB)")
	fs.DurationVar(&c.ExecTimeout, "exec-timeout", c.ExecTimeout, "default wall time of one execution")
	fs.DurationVar(&c.MaxExecTimeout, "max-exec-timeout", c.MaxExecTimeout, "longest timeout a request may ask for")
	fs.DurationVar(&c.InterruptGrace, "interrupt-grace", c.InterruptGrace, "time an interrupted cell has before its kernel is restarted")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", c.IdleTimeout, "a session idle this long is ended")
	fs.DurationVar(&c.MaxIdleTimeout, "max-idle-timeout", c.MaxIdleTimeout, "longest idle timeout a request may ask for")
	fs.DurationVar(&c.MaxLifetime, "max-lifetime", c.MaxLifetime, "longest lifetime a session may ask for (lifetime_s: it ends then, busy or idle)")
	fs.DurationVar(&c.Retention, "retention", c.Retention, "how long a workspace is kept after its session ends")
	fs.StringVar(&c.IdleAction, "idle-action", c.IdleAction, "what the idle timeout does to a session that does not say (idle_action): end, or pause (its sandbox is written to disk and freed, and any call resumes it; under runc every session's kernel is then started in its sandbox, not forked from the shared template, so it takes more memory while it runs)")
	fs.DurationVar(&c.PausedRetention, "paused-retention", c.PausedRetention, "a session paused this long ends (its workspace is kept for --retention)")
	fs.Int64Var(&c.PausedQuotaMB, "paused-quota-mb", c.PausedQuotaMB, "disk the checkpoints of all paused sessions may take (MiB): past it, a pause is refused (an idle session then ends)")
	fs.IntVar(&c.MaxOutputBytes, "max-output-bytes", c.MaxOutputBytes, "text output kept per execution; the rest is cut")
	fs.IntVar(&c.MaxRichBytes, "max-rich-bytes", c.MaxRichBytes, "rich output (images, HTML) kept per execution")
	fs.Int64Var(&c.MaxUploadBytes, "max-upload-bytes", c.MaxUploadBytes, "largest file upload")
	fs.Int64Var(&c.MaxBodyBytes, "max-body-bytes", c.MaxBodyBytes, "largest JSON request body")
	fs.StringVar(&c.Quota, "quota", c.Quota, "workspace disk quotas: auto | loop (ext4 image per workspace) | none")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug | info | warn | error")
	fs.StringVar(&c.Provider, "provider", c.Provider, "model API of the agent loop: openai (Chat Completions: OpenAI, Ollama, vLLM, ...) | openai-responses (OpenAI's Responses API, with the same key and base URL) | anthropic (default: whichever has an API key set)")
	fs.StringVar(&c.Model, "model", c.Model, "model name (default: the provider's default)")
	fs.StringVar(&c.Cluster, "cluster", c.Cluster, "kubernetes: run as one node of a cellbox cluster, registered through the Kubernetes API server (see docs/kubernetes.md); \"\": a single server")
	fs.StringVar(&c.ClusterNode, "cluster-node", c.ClusterNode, "this node's name in the cluster, stable across restarts (default: the host name; in a DaemonSet, the Kubernetes node's name)")
	fs.StringVar(&c.ClusterNamespace, "cluster-namespace", c.ClusterNamespace, "the namespace of the nodes' Leases (default: the pod's namespace, else default)")
	fs.StringVar(&c.ClusterURL, "cluster-url", c.ClusterURL, "the URL the other nodes reach this one at, e.g. http://10.0.0.7:8080 (default: the listen address, when it is not a wildcard)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig file of the API server (default: in-cluster, the pod's service account)")
	fs.DurationVar(&c.ClusterLeaseDuration, "cluster-lease-duration", c.ClusterLeaseDuration, "a node that has not renewed its Lease for this long is unavailable; it renews every third of it")
	fs.StringVar(&c.BaseURL, "base-url", c.BaseURL, "base URL of the model API (default: $OPENAI_BASE_URL or $ANTHROPIC_BASE_URL, else the provider's)")
}

// Load applies, in order, the JSON file named by --config (or CELLBOX_CONFIG) and the
// CELLBOX_* environment (CELLBOX_STATE_DIR for --state-dir, ...) to the flags of fs, then
// parses args. Keys of the file are flag names: {"state-dir": "/srv/cellbox", "pool-size": 4}.
// CELLBOX_API_KEYS is not --api-keys: it holds the keys themselves (package auth reads it).
func Load(fs *flag.FlagSet, args []string) error {
	path := os.Getenv("CELLBOX_CONFIG")
	for i, a := range args {
		switch {
		case a == "--config" || a == "-config":
			if i+1 < len(args) {
				path = args[i+1]
			}
		case strings.HasPrefix(a, "--config="), strings.HasPrefix(a, "-config="):
			path = a[strings.Index(a, "=")+1:]
		}
	}
	fs.String("config", path, "JSON file of settings (keys are flag names)")
	if path != "" {
		if err := loadFile(fs, path); err != nil {
			return err
		}
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		env := "CELLBOX_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && f.Name != "config" && f.Name != "api-keys" {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return fs.Parse(args)
}

func loadFile(fs *flag.FlagSet, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config file: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	for k, v := range m {
		if fs.Lookup(k) == nil || k == "config" {
			return fmt.Errorf("config file %s: unknown setting %q", path, k)
		}
		s := fmt.Sprint(v)
		if f, ok := v.(float64); ok {
			s = fmt.Sprintf("%v", f)
			if f == float64(int64(f)) {
				s = fmt.Sprintf("%d", int64(f))
			}
		}
		if err := fs.Set(k, s); err != nil {
			return fmt.Errorf("config file %s: %s: %w", path, k, err)
		}
	}
	return nil
}

// Validate checks the settings and says what is wrong with each bad one.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	for _, l := range SplitList(c.ToolLanguages) {
		if lang, ok := api.LanguageOf(l); !ok || lang == api.LanguagePython || lang != l {
			bad("--tool-languages: %q is not one of javascript, typescript, r, bash", l)
		}
	}
	switch c.Backend {
	case "runc", "docker", "local-unsafe":
	default:
		bad("--backend %q: choose runc, docker or local-unsafe", c.Backend)
	}
	switch c.GVisorPlatform {
	case "auto", "systrap", "kvm", "ptrace":
		if c.GVisorPlatform != "auto" && c.Backend != "runc" {
			bad("--gvisor-platform %s: runc's (with --runtime runsc); the docker engine's runtimeArgs choose its runsc's platform (docs/security.md)", c.GVisorPlatform)
		}
	default:
		bad("--gvisor-platform %q: choose auto, systrap, kvm or ptrace", c.GVisorPlatform)
	}
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
			bad("--public-url %q: give a scheme and a host, as https://cellbox.example.com", c.PublicURL)
		}
	}
	if c.ArtifactsTTL <= 0 || c.ArtifactsTTL > 7*24*time.Hour {
		bad("--artifacts-ttl %s: give a duration up to 168h (S3's longest presigned URL)", c.ArtifactsTTL)
	}
	switch c.Quota {
	case "auto", "loop", "none":
	default:
		bad("--quota %q: choose auto, loop or none", c.Quota)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("--log-level %q: choose debug, info, warn or error", c.LogLevel)
	}
	switch c.Provider {
	case "", "openai", "openai-responses", "anthropic":
	default:
		bad("--provider %q: choose openai, openai-responses or anthropic", c.Provider)
	}
	if c.StateDir == "" {
		bad("--state-dir is empty")
	}
	if c.PoolSize < 0 || c.PoolSize > 1000 {
		bad("--pool-size %d: must be 0..1000", c.PoolSize)
	}
	if c.PoolMax < 0 || c.PoolMax > 1000 {
		bad("--pool-max %d: must be 0..1000", c.PoolMax)
	}
	switch c.RootFS {
	case "host", "image":
	default:
		bad("--rootfs %q: choose host or image", c.RootFS)
	}
	if err := image.CheckName(c.Image); err != nil {
		bad("--image: %v", err)
	}
	if pools, err := parsePools(c.ImagePools); err != nil {
		bad("--image-pools %.200q: %v", c.ImagePools, err)
	} else if _, ok := pools[c.Image]; ok {
		bad("--image-pools: %s is the default image (--image); --pool-size is its count", c.Image)
	} else if len(pools) > 0 && c.DefaultImage() == "" {
		bad("--image-pools: sandboxes here run on the host's root filesystem; images need --rootfs image (runc) or --backend docker")
	}
	if _, err := c.parseLanguagePools(); err != nil {
		bad("--language-pools %.200q: %v", c.LanguagePools, err)
	}
	if c.MaxSessions < 1 {
		bad("--max-sessions %d: must be at least 1", c.MaxSessions)
	}
	switch c.Cluster {
	case "":
	case "kubernetes":
		if c.ClusterNode != "" && !validNodeName(c.ClusterNode) {
			bad("--cluster-node %.100q: use a Kubernetes node name (lowercase letters, digits, '-' and '.', at most 200)", c.ClusterNode)
		}
		if c.ClusterLeaseDuration < time.Second {
			bad("--cluster-lease-duration %v: must be at least 1s", c.ClusterLeaseDuration)
		}
	default:
		bad("--cluster %q: choose kubernetes, or leave it empty for a single server", c.Cluster)
	}
	if c.TenantMaxSessions < 0 || c.TenantMaxExecutions < 0 {
		bad("--tenant-max-sessions and --tenant-max-executions must not be negative (0: no cap)")
	}
	if c.EgressMaxConns < 1 || c.EgressQuotaMB < 0 || c.EgressRateKiB < 0 {
		bad("--egress-max-conns must be at least 1; --egress-quota-mb and --egress-rate-kib must not be negative (0: none)")
	}
	pos := func(name string, v, max float64) {
		if v <= 0 {
			bad("--%s must be positive", name)
		} else if max > 0 && v > max {
			bad("--%s %v is above --max-%s %v", name, v, name, max)
		}
	}
	pos("memory-mb", float64(c.MemoryMB), float64(c.MaxMemoryMB))
	pos("cpus", c.CPUs, c.MaxCPUs)
	pos("pids", float64(c.Pids), float64(c.MaxPids))
	pos("disk-mb", float64(c.DiskMB), float64(c.MaxDiskMB))
	pos("tmp-mb", float64(c.TmpMB), 0)
	if c.MemoryMB > 0 && c.MemoryMB < 64 {
		bad("--memory-mb %d: a Python kernel needs at least 64", c.MemoryMB)
	}
	pos("exec-timeout", c.ExecTimeout.Seconds(), c.MaxExecTimeout.Seconds())
	pos("idle-timeout", c.IdleTimeout.Seconds(), c.MaxIdleTimeout.Seconds())
	if c.MaxLifetime <= 0 {
		bad("--max-lifetime must be positive")
	}
	if c.InterruptGrace <= 0 {
		bad("--interrupt-grace must be positive")
	}
	if c.Retention < 0 {
		bad("--retention must not be negative")
	}
	if c.IdleAction != "end" && c.IdleAction != "pause" {
		bad("--idle-action %q: end or pause", c.IdleAction)
	}
	if c.PausedRetention <= 0 || c.PausedQuotaMB <= 0 {
		bad("--paused-retention and --paused-quota-mb must be positive")
	}
	if c.MaxOutputBytes < 1024 {
		bad("--max-output-bytes %d: must be at least 1024", c.MaxOutputBytes)
	}
	if c.MaxRichBytes < 0 || c.MaxUploadBytes <= 0 || c.MaxBodyBytes < 1024 {
		bad("--max-rich-bytes, --max-upload-bytes and --max-body-bytes must be positive (body at least 1024)")
	}
	return errors.Join(errs...)
}

// validNodeName: a DNS subdomain short enough that "cellbox-" and it make a Lease name. (Not
// a regexp: one with {0,198} costs every process, the guests too, 140 KB at start.)
func validNodeName(s string) bool {
	if len(s) == 0 || len(s) > 200 {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && ((c != '-' && c != '.') || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

// SessionIDPrefix is what every session id of this server starts with: "" for a single
// server; in a cluster, the node's tag (NodeTag), so that any node can tell a session's node
// from its id.
func (c Config) SessionIDPrefix() string {
	if c.Cluster == "" {
		return ""
	}
	return NodeTag(c.ClusterNode)
}

// NodeTag is the 8 hex digits of a cluster node's session ids: a hash of its name, so
// that it stays the same when the node's server restarts, or its state dir is lost.
func NodeTag(node string) string {
	sum := sha256.Sum256([]byte("cellbox node " + node))
	return hex.EncodeToString(sum[:4])
}

// Images is the folder of built images: --images-dir, else <state-dir>/images.
func (c Config) Images() string {
	if c.ImagesDir != "" {
		return c.ImagesDir
	}
	return filepath.Join(c.StateDir, "images")
}

// DefaultImage is the image of sessions that name none: "" where sandboxes run on no image
// (local-unsafe, and runc with --rootfs host), else --image.
func (c Config) DefaultImage() string {
	if c.Backend == "local-unsafe" || c.Backend == "runc" && c.RootFS != "image" {
		return ""
	}
	return c.Image
}

// Pools is how many warm sandboxes each image keeps: --pool-size for DefaultImage ("" on
// the host's root) and the counts of --image-pools. Call it on a validated Config.
func (c Config) Pools() map[string]int {
	pools, _ := parsePools(c.ImagePools)
	pools[c.DefaultImage()] = c.PoolSize
	return pools
}

// LanguagePoolSizes is how many warm sandboxes of the default image keep each language's
// kernel running (--language-pools), by the language of the kernel: TypeScript's is
// JavaScript's. Call it on a validated Config.
func (c Config) LanguagePoolSizes() map[string]int {
	pools, _ := c.parseLanguagePools()
	return pools
}

func (c Config) parseLanguagePools() (map[string]int, error) {
	pools := map[string]int{}
	var errs []string
	for _, item := range SplitList(c.LanguagePools) {
		name, count, ok := strings.Cut(item, "=")
		n, err := strconv.Atoi(strings.TrimSpace(count))
		lang, known := api.LanguageOf(strings.TrimSpace(name))
		switch {
		case !ok || err != nil:
			errs = append(errs, fmt.Sprintf("%.100q: give LANG=N", item))
		case !known || lang == api.LanguagePython:
			errs = append(errs, fmt.Sprintf("%.50q: give javascript, typescript, r or bash (Python's pool is --pool-size)", name))
		case n < 0 || n > 1000:
			errs = append(errs, fmt.Sprintf("%s=%d: N must be 0..1000", name, n))
		default:
			pools[api.KernelLanguage(lang)] += n
		}
	}
	if len(errs) > 0 {
		return pools, errors.New(strings.Join(errs, "; "))
	}
	return pools, nil
}

// parsePools parses --image-pools, NAME=N,NAME=N; it returns the good entries either way.
func parsePools(s string) (map[string]int, error) {
	pools := map[string]int{}
	var errs []string
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, count, ok := strings.Cut(item, "=")
		name = strings.TrimSpace(name)
		n, err := strconv.Atoi(strings.TrimSpace(count))
		if !ok || err != nil {
			errs = append(errs, fmt.Sprintf("%.100q: give NAME=N", item))
			continue
		}
		if err := image.CheckName(name); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if _, dup := pools[name]; dup {
			errs = append(errs, name+" is given twice")
			continue
		}
		if n < 0 || n > 1000 {
			errs = append(errs, fmt.Sprintf("%s=%d: N must be 0..1000", name, n))
			continue
		}
		pools[name] = n
	}
	if len(errs) > 0 {
		return pools, errors.New(strings.Join(errs, "; "))
	}
	return pools, nil
}

// SplitList splits a comma-separated list of a flag, dropping blanks around and between.
func SplitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}
