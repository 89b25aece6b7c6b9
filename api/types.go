// Package api holds cellbox's public wire types: the JSON bodies of the REST API v1.
//
// It is the contract shared by the server, the Go SDK (client/) and the guest protocol.
// It imports only the standard library and holds no behaviour beyond small helpers.
package api

import (
	"encoding/json"
	"time"
)

// Execution and command statuses. A failure of user code is a status, never an HTTP error.
const (
	StatusOK          = "ok"
	StatusError       = "error"
	StatusTimeout     = "timeout"
	StatusInterrupted = "interrupted"
	StatusOOM         = "oom"
	StatusCrashed     = "crashed"
)

// Output types, following Jupyter's nbformat v4 output model.
const (
	OutputStream        = "stream"
	OutputDisplayData   = "display_data"
	OutputExecuteResult = "execute_result"
	OutputError         = "error"
	// OutputUpdateDisplay replaces the data of the earlier outputs whose DisplayID is the
	// same (IPython's display(..., display_id=...).update(...)); OutputClear clears the
	// outputs so far, or with Wait those before the next one (IPython's clear_output).
	// Both come only to an execution that asked for them (ExecuteRequest.DisplayUpdates);
	// other executions have them applied by the kernel already: an update is dropped, as a
	// static result has no earlier output to change.
	OutputUpdateDisplay = "update_display_data"
	OutputClear         = "clear_output"
)

// File change kinds reported after an execution.
const (
	ChangeCreated  = "created"
	ChangeModified = "modified"
	ChangeDeleted  = "deleted"
)

// WorkspaceDir is where the workspace appears inside every sandbox.
const WorkspaceDir = "/mnt/data"

// HomeDir is the workspace again, in sandboxes that can show it twice (runc, gVisor):
// where programs written for E2B's sandboxes expect the user's files.
const HomeDir = "/home/user"

// The languages a cell may be written in. A request may also use the aliases "python3",
// "js", "node", "ts", "R" and "sh".
const (
	LanguagePython     = "python"
	LanguageJavaScript = "javascript"
	LanguageTypeScript = "typescript"
	LanguageR          = "r"
	LanguageBash       = "bash"
)

// KernelLanguage is the language whose kernel runs a cell of lang: JavaScript's for
// TypeScript (its types stripped by the server), else lang's own.
func KernelLanguage(lang string) string {
	if lang == LanguageTypeScript {
		return LanguageJavaScript
	}
	return lang
}

// LanguageOf returns the language that name (a Language* constant or an alias; "" is
// Python) stands for, and whether it is one.
func LanguageOf(name string) (string, bool) {
	switch name {
	case "", LanguagePython, "python3", "py", "Python":
		return LanguagePython, true
	case LanguageJavaScript, "js", "node", "nodejs", "JavaScript":
		return LanguageJavaScript, true
	case LanguageTypeScript, "ts", "TypeScript":
		return LanguageTypeScript, true
	case LanguageR, "R":
		return LanguageR, true
	case LanguageBash, "sh", "shell", "Bash":
		return LanguageBash, true
	}
	return "", false
}

// Limits bound one session's sandbox. Zero means "the server's default"; a value above the
// server's maximum is refused with invalid_argument.
type Limits struct {
	MemoryMB int     `json:"memory_mb,omitempty"`
	CPUs     float64 `json:"cpus,omitempty"`
	Pids     int     `json:"pids,omitempty"`
	DiskMB   int     `json:"disk_mb,omitempty"`
}

// CreateSessionRequest is the body of POST /v1/sessions.
type CreateSessionRequest struct {
	// Language is the session's default language, for cells that name none: "python" (the
	// default), "javascript", "typescript", "r" or "bash" (see Language*). A cell may name
	// another (ExecuteRequest.Language): each language has its own kernel in the session.
	Language     string            `json:"language,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Limits       *Limits           `json:"limits,omitempty"`
	IdleTimeoutS int               `json:"idle_timeout_s,omitempty"`
	// LifetimeS ends the session this many seconds after its creation, busy or idle; 0: no
	// lifetime (the idle timeout applies either way). PATCH /v1/sessions/{id} sets it anew.
	LifetimeS int `json:"lifetime_s,omitempty"`
	// Metadata is free-form labels, returned with the session: at most 64, keys 1-256 bytes,
	// values up to 1024, 16 KiB in all.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Image names the image the session runs on (built by `cellbox image build NAME`);
	// "": the server's default.
	Image string `json:"image,omitempty"`
	// Network is what the session's code may reach (see Network); nil: the server's default.
	Network *Network `json:"network,omitempty"`
	// Artifacts, on a server with an artifacts store, are the patterns of the files kept
	// there (path.Match, against the path under /mnt/data or the file's name: "*.png",
	// "out/*"); none: every file a run creates or changes. At most 32, 256 bytes each.
	Artifacts []string `json:"artifacts,omitempty"`
	// IdleAction is what the idle timeout does to the session: IdleActionEnd, or
	// IdleActionPause (it is paused, and any call resumes it); "": the server's default
	// (--idle-action). A session created with "pause" can be paused by hand too, on any
	// server that pauses sessions; one created with "end" may not be on every backend
	// (runc: its kernel is forked from a shared template, which a checkpoint cannot take).
	IdleAction string `json:"idle_action,omitempty"`
}

// What the idle timeout does to a session (CreateSessionRequest.IdleAction).
const (
	IdleActionEnd   = "end"
	IdleActionPause = "pause"
)

// Session states (Session.State).
const (
	StateIdle   = "idle"
	StateBusy   = "busy"
	StatePaused = "paused"
)

// ForkRequest is the body of POST /v1/sessions/{id}/fork.
type ForkRequest struct {
	// Count is how many new sessions (1 to MaxForks; 0 means 1).
	Count int `json:"count,omitempty"`
}

// MaxForks caps ForkRequest.Count.
const MaxForks = 32

// ForkResult is the answer to POST /v1/sessions/{id}/fork: the new sessions, each with a
// copy of the session's variables and workspace, in a sandbox of its own.
type ForkResult struct {
	Sessions []Session `json:"sessions"`
}

// UpdateSessionRequest is the body of PATCH /v1/sessions/{id}: at least one field.
type UpdateSessionRequest struct {
	// LifetimeS: the session now ends this many seconds from now, replacing its earlier
	// deadline (if any); it must be positive. 0 (or absent): unchanged.
	LifetimeS int `json:"lifetime_s,omitempty"`
	// Network replaces the session's network policy at once: open connections the new
	// policy refuses are closed. nil: unchanged.
	Network *Network `json:"network,omitempty"`
}

// Egress modes of Network.
const (
	EgressNone      = "none"      // nothing leaves the sandbox
	EgressAllowlist = "allowlist" // only what Allow names, minus Deny
	EgressPublic    = "public"    // every public address, minus Deny
)

// Network is a session's egress policy. The sandbox has no network interface but
// loopback: its code reaches the outside only through the proxy the sandbox's environment
// names (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY), and the server decides, resolves, dials and
// records every connection.
type Network struct {
	// Egress is "none" (the default), "allowlist" or "public".
	Egress string `json:"egress,omitempty"`
	// Allow and Deny: a domain ("pypi.org"), a wildcard ("*.pythonhosted.org": any name
	// below it, not itself), an IP address or a CIDR, each with an optional ":port"
	// ("[2001:db8::1]:443" for an IPv6 address with a port). Deny wins over Allow.
	// Loopback, private, CGNAT, link-local and multicast addresses and the server's own are
	// refused whatever they say, unless the operator allows them (--egress-private-allow);
	// the cloud's host agents (169.254.169.254, 168.63.129.16, ...) and the server's own
	// listeners are refused even then.
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// Secrets are headers the server adds to requests for a domain on their way out; their
	// values never enter the sandbox. Answers about the session carry the headers' names,
	// never their values.
	Secrets []EgressSecret `json:"secrets,omitempty"`
}

// EgressSecret adds headers to the requests for Domain (a domain or a "*." wildcard). For
// HTTPS, the server terminates TLS for that domain with a certificate of the session's own
// authority, which the sandbox trusts, and verifies the upstream against the host's roots.
type EgressSecret struct {
	Domain string `json:"domain"`
	// Headers are set on each request (replacing what the client sent). In answers: the
	// names, each with the value "[redacted]".
	Headers map[string]string `json:"headers,omitempty"`
	// Secret names one the operator configured for the caller's tenant (--egress-secrets),
	// instead of Headers.
	Secret string `json:"secret,omitempty"`
}

// EgressRedacted is what an answer shows in place of a secret header's value.
const EgressRedacted = "[redacted]"

// EgressConnection is one connection (or, for plain HTTP, one request) that code in a
// session asked the proxy for.
type EgressConnection struct {
	Time time.Time `json:"time"`
	// Host is the name or address the client asked for; Address is what the server dialed
	// ("" when it did not).
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Address string `json:"address,omitempty"`
	// Protocol is how the client asked: "http" (a plain request), "connect" (an HTTP
	// CONNECT tunnel) or "socks5".
	Protocol string `json:"protocol"`
	// Decision is "allowed" or "refused"; Rule the policy entry that decided ("" for the
	// mode itself), Reason a sentence for a refusal.
	Decision string `json:"decision"`
	Rule     string `json:"rule,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Intercepted: TLS was terminated to add a secret's headers.
	Intercepted bool `json:"intercepted,omitempty"`
	// Status is the upstream's HTTP status for a plain or intercepted request; 0 otherwise.
	Status int `json:"status,omitempty"`
	// BytesOut went from the sandbox to the destination, BytesIn the other way.
	BytesOut   int64 `json:"bytes_out"`
	BytesIn    int64 `json:"bytes_in"`
	DurationMS int64 `json:"duration_ms"`
	// Open: the connection is still open (the byte counts are so far).
	Open bool `json:"open,omitempty"`
}

// EgressLog is the answer of GET /v1/sessions/{id}/egress: the session's policy, what it
// has used, and its most recent connections, newest first.
type EgressLog struct {
	Network     Network            `json:"network"`
	Connections []EgressConnection `json:"connections"`
	// Open is the number of open connections; BytesUsed counts both ways, against
	// QuotaBytes (0: none).
	Open       int   `json:"open"`
	BytesUsed  int64 `json:"bytes_used"`
	QuotaBytes int64 `json:"quota_bytes,omitempty"`
}

// Session describes a live session.
type Session struct {
	ID             string    `json:"id"`
	Language       string    `json:"language"`
	State          string    `json:"state"` // StateIdle, StateBusy or StatePaused
	Limits         Limits    `json:"limits"`
	IdleTimeoutS   int       `json:"idle_timeout_s"`
	ExecutionCount int       `json:"execution_count"`
	CreatedAt      time.Time `json:"created_at"`
	LastActiveAt   time.Time `json:"last_active_at"`
	// ExpiresAt is when the session ends whatever it does (see LifetimeS); nil: no lifetime.
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// Metadata is what the session was created with.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Artifacts is what the session was created with.
	Artifacts []string `json:"artifacts,omitempty"`
	// Image is the image the session runs on; "" on a server that runs sandboxes on the
	// host's root filesystem.
	Image string `json:"image,omitempty"`
	// Network is the session's egress policy, secret values redacted.
	Network Network `json:"network"`
	// IdleAction is what the idle timeout does to it (IdleActionEnd or IdleActionPause).
	IdleAction string `json:"idle_action"`
	// PausedAt is when it was paused (State StatePaused); nil: it is not.
	PausedAt *time.Time `json:"paused_at,omitempty"`
	// CheckpointBytes is the disk its checkpoint takes while paused.
	CheckpointBytes int64 `json:"checkpoint_bytes,omitempty"`
}

// SessionList is the body of GET /v1/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
	// UnavailableNodes, in a cluster, names the nodes that are down or did not answer: their
	// sessions are missing from Sessions.
	UnavailableNodes []string `json:"unavailable_nodes,omitempty"`
}

// ClusterView is the body of GET /v1/cluster: the nodes of the cluster a server is one of.
type ClusterView struct {
	Node  string        `json:"node"`  // the node that answered
	Nodes []ClusterNode `json:"nodes"` // every node with a Lease, by name
}

// ClusterNode is one node of a cluster, as its Lease says.
type ClusterNode struct {
	Name     string `json:"name"`
	Live     bool   `json:"live"`               // it serves its sessions
	Stopping bool   `json:"stopping,omitempty"` // it said it is stopping (a restart)
	// Draining: its Kubernetes Node is cordoned; it takes no new sessions and moves its
	// sessions to other nodes.
	Draining  bool      `json:"draining,omitempty"`
	Sessions  int       `json:"sessions"`   // all tenants'
	Room      int       `json:"room"`       // how many more sessions it takes
	Warm      int       `json:"warm"`       // warm sandboxes: a new session there takes milliseconds
	RenewedAt time.Time `json:"renewed_at"` // its Lease's last renewal
}

// TraceHeader, sent with any value on POST /v1/sessions/{id}/execute, asks where the
// cell's time went: the answer carries a Server-Timing header (W3C Server Timing; a
// trailer of an event stream) whose entries are the hops of the cell's path, each measured
// in the process it names, as nested spans in milliseconds: server (from taking the
// request to the result), guest_call (the call to the sandbox's guest and back), guest (the
// guest, from taking the call to writing the result), files (the guest's workspace scans
// for the result's files), kernel (the cell to the kernel's runner and back), runner (the
// runner, from reading the cell to writing its end) and run_cell (IPython's run_cell). An
// entry the path did not measure is left out.
const TraceHeader = "Cellbox-Trace"

// ExecuteRequest is the body of POST /v1/sessions/{id}/execute.
type ExecuteRequest struct {
	Code     string  `json:"code"`
	TimeoutS float64 `json:"timeout_s,omitempty"`
	// Language is the code's language (see Language*); "": the session's. Each language
	// runs in a kernel of its own, started at its first cell, with its own variables;
	// JavaScript and TypeScript share one (TypeScript's types are stripped first).
	Language string `json:"language,omitempty"`
	// Context names a separate namespace in the session's kernel, with its own variables,
	// imports and working directory (which starts at /mnt/data); made at its first use, it
	// lives until it is deleted (DELETE /v1/sessions/{id}/contexts/{name}) or the kernel
	// restarts. "" is the default namespace. Names: 1 to 64 of A-Z a-z 0-9 _ . -.
	Context string `json:"context,omitempty"`
	// Env is set in the kernel's environment (os.environ) for this execution only: the
	// variables are restored, or removed again, when it ends.
	Env map[string]string `json:"env,omitempty"`
	// Links asks for a URL (FileChange.URL) to each file the execution created or changed.
	Links bool `json:"links,omitempty"`
	// NoHistory runs the code without counting it or keeping it in the kernel's history
	// (In, Out, _): Jupyter's store_history false.
	NoHistory bool `json:"no_history,omitempty"`
	// UserExpressions are Python expressions evaluated after the code ran (whether or not
	// it raised), each answered in ExecuteResult.UserExpressions under its key: Jupyter's
	// user_expressions. At most 16.
	UserExpressions map[string]string `json:"user_expressions,omitempty"`
	// DisplayUpdates asks for the outputs that change earlier ones: display_data and
	// execute_result carry their DisplayID, and update_display_data and clear_output come
	// as outputs of their own, for a client that shows outputs live (Jupyter's front-ends).
	DisplayUpdates bool `json:"display_updates,omitempty"`
}

// Output is one output of an execution, in Jupyter's output model.
//
// stream: Name ("stdout"/"stderr") and Text. display_data and execute_result: Data, a MIME
// bundle whose values are strings (image/png is base64) except JSON types, which are JSON
// values. error: EName, EValue, Traceback.
type Output struct {
	Type           string         `json:"type"`
	Name           string         `json:"name,omitempty"`
	Text           string         `json:"text,omitempty"`
	Data           map[string]any `json:"data,omitempty"`
	Metadata       map[string]any `json:"metadata,omitempty"`
	ExecutionCount int            `json:"execution_count,omitempty"`
	EName          string         `json:"ename,omitempty"`
	EValue         string         `json:"evalue,omitempty"`
	Traceback      []string       `json:"traceback,omitempty"`
	// DisplayID names a display_data (or execute_result) that later update_display_data
	// outputs with the same id replace; only with ExecuteRequest.DisplayUpdates.
	DisplayID string `json:"display_id,omitempty"`
	// Wait, for clear_output: clear only when the next output comes.
	Wait bool `json:"wait,omitempty"`
}

// FileChange is a workspace file an execution or command created, modified or deleted.
type FileChange struct {
	Path   string `json:"path"` // absolute, under /mnt/data
	Size   int64  `json:"size"`
	Change string `json:"change"`
	// URL downloads the file without an API key: when the server keeps files in an
	// artifacts store, the stored object's URL (presigned, or plain where the store is
	// public); else, when the request asked for links, a link to the session's file for an
	// hour (see LinkRequest).
	URL string `json:"url,omitempty"`
	// Object names the stored copy ("s3://bucket/key"), when the server has an artifacts
	// store.
	Object string `json:"object,omitempty"`
}

// LinkRequest is the body of POST /v1/sessions/{id}/links: a URL for one file of the
// session's workspace and one method, usable without an API key until it expires.
type LinkRequest struct {
	Path   string `json:"path"`             // under /mnt/data, or relative to it
	Method string `json:"method,omitempty"` // GET (the default; HEAD too) to download, PUT to upload
	// ExpiresInS is the link's life in seconds: default 3600, at most 604800 (a week).
	ExpiresInS float64 `json:"expires_in_s,omitempty"`
}

// Link is a signed URL: Method on the file at Path, until ExpiresAt, without an API key.
type Link struct {
	URL       string    `json:"url"`
	Method    string    `json:"method"`
	Path      string    `json:"path"` // absolute, under /mnt/data
	ExpiresAt time.Time `json:"expires_at"`
}

// ExecuteResult is the result of running code in a session.
type ExecuteResult struct {
	Status         string       `json:"status"`
	ExecutionCount int          `json:"execution_count"`
	Outputs        []Output     `json:"outputs"`
	Files          []FileChange `json:"files"`
	Truncated      bool         `json:"truncated"`
	DurationMS     int64        `json:"duration_ms"`
	// Message explains a status other than ok or error, for a person or a model,
	// e.g. "the kernel ran out of memory (limit 1024 MiB) and was restarted; files are kept".
	Message string `json:"message,omitempty"`
	// KernelRestarted: the kernel was restarted during this run or just before it (it had
	// stopped since the last one): variables, imports and tools not saved are gone.
	KernelRestarted bool `json:"kernel_restarted,omitempty"`
	// UserExpressions answers ExecuteRequest.UserExpressions, by key: a display_data with
	// the value's MIME bundle, or an error.
	UserExpressions map[string]Output `json:"user_expressions,omitempty"`
}

// CommandRequest is the body of POST /v1/sessions/{id}/commands.
type CommandRequest struct {
	Cmd      []string          `json:"cmd"`
	Stdin    string            `json:"stdin,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Cwd      string            `json:"cwd,omitempty"` // relative to /mnt/data
	TimeoutS float64           `json:"timeout_s,omitempty"`
	Links    bool              `json:"links,omitempty"` // a URL to each file it created or changed (FileChange.URL)
}

// CommandResult is the result of running a program in a session.
// Status is ok when the program exited 0, error for another exit code (or a program that
// could not be started, with ExitCode -1 and the reason in Message), timeout when it was
// killed at its deadline, oom when the memory limit killed it.
type CommandResult struct {
	Status     string       `json:"status"`
	ExitCode   int          `json:"exit_code"`
	Stdout     string       `json:"stdout"`
	Stderr     string       `json:"stderr"`
	Files      []FileChange `json:"files"`
	Truncated  bool         `json:"truncated"`
	DurationMS int64        `json:"duration_ms"`
	Message    string       `json:"message,omitempty"`
}

// FileInfo describes one workspace entry.
type FileInfo struct {
	Path    string    `json:"path"` // absolute, under /mnt/data
	Name    string    `json:"name"`
	Type    string    `json:"type"` // "file", "dir", "symlink" or "other"
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time"`
}

// FileList is the body of GET /v1/sessions/{id}/files?path=dir.
type FileList struct {
	Path  string     `json:"path"`
	Files []FileInfo `json:"files"`
}

// InputFile is a file to place in the workspace of a one-shot execution.
// Exactly one of Content (text) and ContentBase64 is used.
type InputFile struct {
	Path          string `json:"path"`
	Content       string `json:"content,omitempty"`
	ContentBase64 string `json:"content_base64,omitempty"`
}

// OneShotRequest is the body of POST /v1/execute: a fresh sandbox, discarded afterwards.
type OneShotRequest struct {
	Language string            `json:"language,omitempty"`
	Code     string            `json:"code"`
	Files    []InputFile       `json:"files,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	Limits   *Limits           `json:"limits,omitempty"`
	TimeoutS float64           `json:"timeout_s,omitempty"`
	// Image is as in CreateSessionRequest: "" for the server's default.
	Image string `json:"image,omitempty"`
	// Network is as in CreateSessionRequest.
	Network *Network `json:"network,omitempty"`
	// Links asks for a URL to each file the code created or changed (FileChange.URL). A
	// one-shot's sandbox, and its files, are discarded when it ends: the URLs are an
	// artifacts store's, and without one the request is refused (409).
	Links bool `json:"links,omitempty"`
}

// NotebookRequest is the body of POST /v1/notebooks/execute: a Jupyter notebook (nbformat
// 4) whose code cells run one after another, as nbclient and papermill run them.
type NotebookRequest struct {
	// Notebook is the .ipynb document, a JSON object of nbformat 4.
	Notebook json.RawMessage `json:"notebook"`
	// SessionID runs the notebook in this session, which keeps its state and lives on;
	// "": a new session, made with Session (nil: the defaults), and ended afterwards unless
	// KeepSession.
	SessionID   string                `json:"session_id,omitempty"`
	Session     *CreateSessionRequest `json:"session,omitempty"`
	KeepSession bool                  `json:"keep_session,omitempty"`
	// Parameters, papermill's: a code cell tagged "injected-parameters" assigns each value,
	// as a Python literal, to its name (a Python identifier); it goes right after the first
	// cell tagged "parameters" (at the top without one) and replaces an earlier injected
	// cell. Values are JSON's: objects become dicts, arrays lists, null None. A Go float64
	// of an integral value encodes as an integer; json.Number("1.0") keeps it a float.
	Parameters map[string]any `json:"parameters,omitempty"`
	// CellTimeoutS bounds each cell as ExecuteRequest.TimeoutS does (0: the server's
	// default).
	CellTimeoutS float64 `json:"cell_timeout_s,omitempty"`
	// AllowErrors goes on past a cell that raised or timed out; without it the run stops
	// there, as nbclient's does. A run stops at a cell that cost the kernel (oom, crashed)
	// or was interrupted either way.
	AllowErrors bool `json:"allow_errors,omitempty"`
}

// NotebookResult is the answer of POST /v1/notebooks/execute (its "result" event with
// Server-Sent Events). A failure of the notebook's code is a status, as for ExecuteResult.
type NotebookResult struct {
	// Notebook is the executed notebook: each code cell that ran has its outputs and
	// execution_count; code cells that did not (after a stop, empty ones, those tagged
	// skip-execution) have none and a null count; everything else is as it came.
	Notebook json.RawMessage `json:"notebook"`
	// Status is ok when every code cell that ran was ok (an error in a cell tagged
	// raises-exception counts as ok), else the status of the first that was not (error,
	// timeout, oom, crashed, interrupted), which FailedCell names (its index in the
	// returned notebook's cells) with the error's EName and EValue.
	Status     string `json:"status"`
	FailedCell *int   `json:"failed_cell,omitempty"`
	EName      string `json:"ename,omitempty"`
	EValue     string `json:"evalue,omitempty"`
	// Message explains a status other than ok or error, as ExecuteResult's does.
	Message string `json:"message,omitempty"`
	// SessionID is the session the notebook ran in: ended by now, unless the request
	// named it or asked to keep it.
	SessionID string `json:"session_id"`
	// Truncated: outputs were cut, a cell's past the server's limits of one execution, or
	// the run's past 64 MiB of them (later cells still ran); a note in the outputs says so.
	Truncated  bool  `json:"truncated,omitempty"`
	DurationMS int64 `json:"duration_ms"`
}

// NotebookCell is a code cell of a notebook that finished running: the "cell" event of
// POST /v1/notebooks/execute with Server-Sent Events.
type NotebookCell struct {
	Index int `json:"index"` // in the notebook's cells (the injected parameters' cell counted)
	Cells int `json:"cells"` // how many cells the notebook has
	// Status is as ExecuteResult's; EName and EValue name an error.
	Status         string `json:"status"`
	ExecutionCount int    `json:"execution_count"`
	// Outputs are the cell's outputs as the notebook holds them (nbformat 4: output_type
	// stream, display_data, execute_result or error).
	Outputs []map[string]any `json:"outputs"`
	EName   string           `json:"ename,omitempty"`
	EValue  string           `json:"evalue,omitempty"`
	Message string           `json:"message,omitempty"`
	// Files are the workspace files the cell created, changed or deleted.
	Files      []FileChange `json:"files,omitempty"`
	DurationMS int64        `json:"duration_ms"`
}

// Error codes of the service's error shape.
const (
	CodeInvalidArgument    = "invalid_argument"
	CodeNotFound           = "not_found"
	CodeResourceExhausted  = "resource_exhausted"
	CodeUnavailable        = "unavailable"
	CodeFailedPrecondition = "failed_precondition"
	CodeTooLarge           = "too_large"
	CodeInternal           = "internal"
	CodeCanceled           = "canceled"
	CodePermissionDenied   = "permission_denied"
	CodeUnauthenticated    = "unauthenticated" // no API key, or not a valid one (401)
)

// ErrorBody is the body of every HTTP 4xx/5xx response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is the stable error shape: a code from the list above and a message written
// for a person or a model.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Health is the body of GET /healthz.
type Health struct {
	Status   string `json:"status"`
	Backend  string `json:"backend"`
	Sessions int    `json:"sessions"`
	Pool     int    `json:"pool"`
}

// Model providers of POST /v1/agent.
const (
	ProviderOpenAI          = "openai"           // Chat Completions: OpenAI and every server that speaks it
	ProviderOpenAIResponses = "openai-responses" // Responses, with the same key and base URL as openai
	ProviderAnthropic       = "anthropic"        // Messages
)

// AgentRequest is the body of POST /v1/agent: a model answers Input, writing and running
// code in a session. The server's provider credentials come from its environment.
type AgentRequest struct {
	Input     string      `json:"input"`
	Provider  string      `json:"provider,omitempty"`   // openai | openai-responses | anthropic; default: the server's
	Model     string      `json:"model,omitempty"`      // default: the server's for that provider
	SessionID string      `json:"session_id,omitempty"` // run in this session; default: a new one, kept
	Files     []InputFile `json:"files,omitempty"`      // placed in /mnt/data first
	System    string      `json:"system,omitempty"`     // replaces the default system prompt
	MaxSteps  int         `json:"max_steps,omitempty"`  // tool calls allowed; default 10
	Links     bool        `json:"links,omitempty"`      // a URL to each file in the answer's files (FileChange.URL)
}

// AgentStep is one tool call the model made: the code (or shell command) and what it gave.
type AgentStep struct {
	// ID is the model's id of the call; in a conversation, approvals name the call by it.
	ID   string `json:"id,omitempty"`
	Tool string `json:"tool"` // "python", "shell" or the name of one of the session's tools
	// Code is the code (python), the command line (shell) or the arguments, a JSON object
	// (a session's tool).
	Code          string          `json:"code"`
	Result        *ExecuteResult  `json:"result,omitempty"`         // python
	CommandResult *CommandResult  `json:"command_result,omitempty"` // shell
	ToolResult    *ToolCallResult `json:"tool_result,omitempty"`    // a session's tool
	// Error says why the call did not run (bad arguments, or cellbox failed).
	Error string `json:"error,omitempty"`
	// Declined: the person chose Skip or Stop at the approval, so it did not run.
	Declined bool `json:"declined,omitempty"`
}

// Agent stop reasons.
const (
	AgentDone      = "done"       // the model answered
	AgentStepLimit = "step_limit" // the step limit was reached and the model answered with what it had
	AgentMaxTokens = "max_tokens" // the answer was cut at the model's token limit
)

// AgentResponse is the result of POST /v1/agent.
type AgentResponse struct {
	Output     string       `json:"output"` // the model's answer
	SessionID  string       `json:"session_id"`
	Steps      []AgentStep  `json:"steps"`
	Files      []FileChange `json:"files"` // files the code changed, the latest change of each
	StopReason string       `json:"stop_reason"`
	Provider   string       `json:"provider"`
	Model      string       `json:"model"`
}

// Approval modes of a conversation.
const (
	ApproveAuto = "auto" // every call the model makes runs
	ApproveAsk  = "ask"  // each call waits for a decision (POST /v1/conversations/{id}/approvals)
)

// Approval decisions.
const (
	DecisionRun  = "run"  // run the call
	DecisionSkip = "skip" // don't run it; the model is told and goes on
	DecisionStop = "stop" // don't run it, and end the answer
)

// Conversation states.
const (
	ConversationIdle      = "idle"      // no answer is being written
	ConversationAnswering = "answering" // the model is answering, or its code runs
	ConversationWaiting   = "waiting"   // a call waits for an approval decision
)

// ConversationRequest is the body of POST /v1/conversations: a conversation with a model
// about one session, kept on the server. Later messages keep its history and the session's
// variables.
type ConversationRequest struct {
	SessionID string `json:"session_id,omitempty"` // the session to work in; default: a new one
	Provider  string `json:"provider,omitempty"`   // openai | openai-responses | anthropic; default: the server's
	Model     string `json:"model,omitempty"`      // default: the server's for that provider
	System    string `json:"system,omitempty"`     // replaces the default system prompt
	MaxSteps  int    `json:"max_steps,omitempty"`  // tool calls allowed per message; default 10
	Approve   string `json:"approve,omitempty"`    // auto (default) | ask
}

// Conversation describes a conversation. Turns is filled by GET /v1/conversations/{id}
// only.
type Conversation struct {
	ID        string    `json:"id"`
	SessionID string    `json:"session_id"`
	Provider  string    `json:"provider"`
	Model     string    `json:"model"`
	Approve   string    `json:"approve"`
	MaxSteps  int       `json:"max_steps"`
	State     string    `json:"state"` // idle | answering | waiting
	Title     string    `json:"title"` // the first message, cut to 80 characters
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Waiting is the call that waits for a decision (state waiting), to decide with POST
	// /v1/conversations/{id}/approvals by a client that did not see its call event.
	Waiting *WaitingCall `json:"waiting,omitempty"`
	// TurnCount is how many messages were answered (or are being answered).
	TurnCount int `json:"turn_count"`
	// Turns are the kept messages and their answers, oldest first; the server keeps the
	// latest ones (the model too may see fewer: old images and, past its budget, old turns
	// are dropped from what it is sent).
	Turns []ConversationTurn `json:"turns,omitempty"`
}

// WaitingCall is a call that waits for an approval decision.
type WaitingCall struct {
	ID   string `json:"id"`
	Tool string `json:"tool"`
	Code string `json:"code"`
}

// ConversationList is the body of GET /v1/conversations.
type ConversationList struct {
	Conversations []Conversation `json:"conversations"`
	// UnavailableNodes: in a cluster, the nodes that are down or did not answer; their
	// conversations are missing from the list.
	UnavailableNodes []string `json:"unavailable_nodes,omitempty"`
}

// UpdateConversationRequest is the body of PATCH /v1/conversations/{id}; a field left out
// stays as it is. It takes effect from the next message.
type UpdateConversationRequest struct {
	Approve  string `json:"approve,omitempty"`  // auto | ask
	Provider string `json:"provider,omitempty"` // openai | openai-responses | anthropic
	Model    string `json:"model,omitempty"`
}

// MessageRequest is the body of POST /v1/conversations/{id}/messages.
type MessageRequest struct {
	Input string `json:"input"`
	// Files names files already in the session's workspace (relative to /mnt/data, e.g.
	// uploaded with PUT .../files/{path}) that this message brings: the model is told their
	// paths, sizes and, for CSV and TSV files, their columns and first rows.
	Files []string `json:"files,omitempty"`
}

// ConversationTurn is one message and its answer.
type ConversationTurn struct {
	Input        string       `json:"input"`
	Files        []string     `json:"files,omitempty"` // the files the message brought
	Steps        []AgentStep  `json:"steps"`
	Output       string       `json:"output"`        // the model's answer
	ChangedFiles []FileChange `json:"changed_files"` // files the code changed, the latest change of each
	// StopReason: done, step_limit, max_tokens, stopped (Stop, or Stop at an approval), or
	// error (Error says why); "" while the answer is being written.
	StopReason string     `json:"stop_reason"`
	Error      string     `json:"error,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	EndedAt    *time.Time `json:"ended_at,omitempty"`
}

// ApprovalRequest is the body of POST /v1/conversations/{id}/approvals: the decision on a
// call that waits (its id came in the message stream's call event).
type ApprovalRequest struct {
	CallID   string `json:"call_id"`
	Decision string `json:"decision"` // run | skip | stop
}

// AgentStopped is the stop reason of an answer the person stopped.
const AgentStopped = "stopped"

// AgentError is the stop reason of a conversation turn that failed (the model API, or
// cellbox); the turn's Error says why.
const AgentError = "error"

// Provider is a model API the server is configured with.
type Provider struct {
	Name         string `json:"name"`          // openai | openai-responses | anthropic
	DefaultModel string `json:"default_model"` // used when a request names no model
	// Models are the model names to offer; any other name may still be given.
	Models  []string `json:"models"`
	Default bool     `json:"default"` // used when a request names no provider
}

// ProviderList is the body of GET /v1/providers.
type ProviderList struct {
	Providers []Provider `json:"providers"`
}

// SessionTool is a function defined in a session's kernel (from cellbox import tool) that a
// model can call: GET /v1/sessions/{id}/tools lists them as {"tools": [...]}.
type SessionTool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"input_schema"` // JSON Schema (draft 2020-12) of the arguments, an object
	Source      string         `json:"source"`       // the function's source, as defined
	// Saved: the API's caller saved it to the API key's library (POST
	// /v1/sessions/{id}/tools/{name}/save) or loaded it from there, as it is now: a kernel
	// restart defines it again from the session's own copy (not the library's version).
	Saved bool `json:"saved"`
	// SaveProposed: its code asked to save it (@tool(save=True), whose source stands
	// alone). Only the API's caller saves it: code in a session never writes the library.
	SaveProposed bool `json:"save_proposed"`
}

// SessionToolList is the body of GET /v1/sessions/{id}/tools (without format) and of
// POST /v1/sessions/{id}/tools/load.
type SessionToolList struct {
	Tools []SessionTool `json:"tools"`
}

// ToolCallRequest is the body of POST /v1/sessions/{id}/tools/{name}/call.
type ToolCallRequest struct {
	// Arguments is a JSON object, checked against the tool's input schema before the
	// kernel sees it; null or absent means {}.
	Arguments json.RawMessage `json:"arguments,omitempty"`
	TimeoutS  float64         `json:"timeout_s,omitempty"`
	Links     bool            `json:"links,omitempty"` // a URL to each file the call created or changed (FileChange.URL)
}

// ToolCallResult is the result of calling a session's tool: a cell's result, with the
// function's return value picked out of its outputs.
type ToolCallResult struct {
	Status string `json:"status"` // as ExecuteResult's: ok, error, timeout, interrupted, oom, crashed
	// HasValue: the function returned a value JSON holds, in Value (null included).
	HasValue bool `json:"has_value"`
	Value    any  `json:"value,omitempty"`
	// Text is the repr of a return value JSON cannot hold (at most 64 KiB), and ValueType
	// its type's name.
	Text      string `json:"text,omitempty"`
	ValueType string `json:"value_type,omitempty"`
	// Outputs are what the call printed, displayed and raised (the error of a tool that
	// raised), without the return value's own output.
	Outputs    []Output     `json:"outputs"`
	Files      []FileChange `json:"files"`
	Truncated  bool         `json:"truncated"`
	DurationMS int64        `json:"duration_ms"`
	Message    string       `json:"message,omitempty"`
}

// SavedTool is a tool kept in an API key's library: one defined with @tool(save=True) that
// the API's caller saved (POST /v1/sessions/{id}/tools/{name}/save). Its source stands
// alone (the function and the imports it uses), so any of the key's sessions can load it
// (in a cluster, on any node). It may depend on the image's packages and the session's workspace
// files, not on anything else a session defined.
type SavedTool struct {
	Name        string         `json:"name"`
	Description string         `json:"description"`
	InputSchema map[string]any `json:"input_schema"`
	Source      string         `json:"source"`
	SavedAt     time.Time      `json:"saved_at"`
}

// SavedToolList is the body of GET /v1/saved-tools, in name order.
type SavedToolList struct {
	Tools []SavedTool `json:"tools"`
	// UnavailableNodes, in a cluster, names the nodes that are down or did not answer:
	// tools saved only there are missing from the list.
	UnavailableNodes []string `json:"unavailable_nodes,omitempty"`
}

// SaveToolRequest is the body of POST /v1/sessions/{id}/tools/{name}/save, which saves the
// session's tool, as it is, to the API key's library (none: the tool as the session has it
// now).
type SaveToolRequest struct {
	// Source, when given, is the source the caller read and means to save: a tool whose
	// source is no longer this (the session's code defined it again meanwhile) is not
	// saved (409 failed_precondition).
	Source string `json:"source,omitempty"`
}

// LoadToolsRequest is the body of POST /v1/sessions/{id}/tools/load: the saved tools to
// define in the session's kernel; none named: all of the key's.
type LoadToolsRequest struct {
	Names []string `json:"names,omitempty"`
}

// CompleteRequest is the body of POST /v1/sessions/{id}/complete: what the kernel's
// completer (IPython's) offers at a cursor, as Jupyter's complete_request.
type CompleteRequest struct {
	Code string `json:"code"`
	// CursorPos is the cursor's offset in Code, in Unicode code points (not bytes, not
	// UTF-16 units); absent: the end of Code.
	CursorPos *int `json:"cursor_pos,omitempty"`
	// Context names the execution context whose names complete; "": the default.
	Context string `json:"context,omitempty"`
}

// Completion answers a CompleteRequest: Matches replace Code's text from CursorStart to
// CursorEnd (code points).
type Completion struct {
	Matches     []string `json:"matches"`
	CursorStart int      `json:"cursor_start"`
	CursorEnd   int      `json:"cursor_end"`
	// Types, when the completer knows them, gives each match's kind ("function",
	// "module", "instance", ...), in the order of Matches.
	Types []string `json:"types,omitempty"`
}

// InspectRequest is the body of POST /v1/sessions/{id}/inspect: what the kernel knows of
// the name at a cursor (IPython's inspector; Jupyter's inspect_request).
type InspectRequest struct {
	Code      string `json:"code"`
	CursorPos *int   `json:"cursor_pos,omitempty"` // as CompleteRequest's
	// DetailLevel 0 shows the signature and docstring, 1 the source too (IPython's ??).
	DetailLevel int    `json:"detail_level,omitempty"`
	Context     string `json:"context,omitempty"`
}

// Inspection answers an InspectRequest: Data is a MIME bundle (text/plain, text/html)
// when Found.
type Inspection struct {
	Found bool           `json:"found"`
	Data  map[string]any `json:"data,omitempty"`
}

// IsComplete says whether code is ready to run as it stands (Jupyter's
// is_complete_reply): Status is "complete", "incomplete" (Indent is what the next line
// starts with), "invalid" or "unknown".
type IsComplete struct {
	Status string `json:"status"`
	Indent string `json:"indent,omitempty"`
}
