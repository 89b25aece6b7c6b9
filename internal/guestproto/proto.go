// Package guestproto is the versioned protocol between the cellbox server and the guest, the
// daemon that runs as process 1 inside every sandbox. It is the only package both sides import.
//
// Transport: the guest's stdin/stdout, multiplexed with hashicorp/yamux. The server is the
// yamux client and opens one stream per call; the guest accepts them. On each stream the
// server writes one Request as a JSON line, then, for OpPutFile only, the file's bytes in
// ChunkWriter framing (an upload without its end chunk is discarded). The guest answers with
// Message JSON lines: zero or more Output messages, for OpExecute at most one Tools message
// (after the outputs), and exactly one final message (Result, CommandResult, File, Listing,
// Entry, Hello, OK or Error). An execute with Request.Trace has the guest's Trace beside
// its Result, in the final message.
// For OpGetFile the final File message is followed by exactly File.Size raw bytes. A
// command with Request.Stream set sends its output as Output messages while it runs.
//
// The guest opens streams too: one per TCP connection that code in the sandbox makes to
// its egress proxy (see OpEgress). Its first line is Request{Op: OpEgress}; then the
// connection's bytes flow both ways, unparsed by the guest: the server reads the proxy
// request (HTTP or SOCKS5) and decides. Closing a stream's write side is the connection's
// half-close.
//
// Ops: hello, configure; checkpoint (see OpCheckpoint); trust (the session's certificate authority); execute (a cell, or
// with Request.Quiet a call the user did not write: a tool's call or load, uncounted, kept
// out of the kernel's history), interrupt, restart, delete_context (the kernel); command (a
// program, started in a workspace folder or, with Request.Dir, in any folder the sandbox's
// user may enter); and the workspace's files: put_file, get_file, list_files, delete_file
// (a file or an empty folder), make_dir (with its parents), move (a file or a folder, making
// the destination's parents), remove (a folder with everything in it) and stat (one entry,
// its symbolic link not followed). Every file op resolves its paths beneath the workspace.
//
// The kernel's tools: module cellbox in the kernel (from cellbox import tool) turns functions
// into tools a model can call. After a run that changed them, the guest sends them all as a
// Tools message on the execute stream, before the Result; a run that did not, sends none.
//
// The server treats everything the guest says as untrusted: the guest is a process of the
// sandbox (uid 0 there with a few capabilities in the runc backend, running user code as
// another uid; in the local backend user code's own uid), and a sandbox whose user code
// escalated may answer in its place. Lines are capped at MaxMessageSize, and the client
// checks what it decodes.
//
// Not for: the public REST types (package api) or how a sandbox is started (package sandbox).
package guestproto

import "github.com/cellbox/cellbox/api"

// Version is bumped on any change of behaviour. The server refuses a guest older than
// MinVersion or newer than Version: a paused session's checkpoint holds the guest it was
// paused with, which an upgraded server resumes; what that guest lacks (Client.Supports)
// is refused with failed_precondition.
const Version = 12

// MinVersion is the oldest guest the server still speaks to.
const MinVersion = 9

// Since which version the guest has what (for Client.Supports).
const (
	// VersionAsk: complete, inspect and is_complete; execute's user expressions,
	// display updates, NoHistory and Stdin.
	VersionAsk = 10
	// VersionLanguages: execute's Language (kernels for JavaScript, TypeScript, R, Bash),
	// and Config's Image.
	VersionLanguages = 11
	// VersionTrace: execute's Trace (the guest's and the runner's durations beside the
	// Result).
	VersionTrace = 12
)

// MaxUserExpressions caps ExecuteRequest.UserExpressions; MaxUserExpression one of them.
const (
	MaxUserExpressions = 16
	MaxUserExpression  = 4 << 10
)

// MaxCompletions caps the matches of a Completion; MaxAskCode the code of a complete,
// inspect or is_complete request.
const (
	MaxCompletions = 1000
	MaxAskCode     = 1 << 20
)

// MaxMessageSize caps one JSON line in either direction (a PNG output is one line).
const MaxMessageSize = 32 << 20

// Ops.
const (
	OpHello      = "hello"
	OpConfigure  = "configure"
	OpExecute    = "execute"
	OpInterrupt  = "interrupt"
	OpRestart    = "restart"
	OpCommand    = "command"
	OpPutFile    = "put_file"
	OpGetFile    = "get_file"
	OpListFiles  = "list_files"
	OpDeleteFile = "delete_file"
	// OpDeleteContext drops a named execution context of the kernel (Request.Context).
	OpDeleteContext = "delete_context"
	// OpMakeDir makes folder Request.Path and its missing parents; answers Entry.
	OpMakeDir = "make_dir"
	// OpMove renames Request.Path to Request.To (a file, a link or a folder), making To's
	// missing parents; answers Entry (of To).
	OpMove = "move"
	// OpRemove removes Request.Path: a file, a link (not what it points to) or a folder
	// with everything in it; answers OK.
	OpRemove = "remove"
	// OpStat describes Request.Path, a link not followed; answers Entry.
	OpStat = "stat"
	// OpTrust makes code in the sandbox trust Request.CA (PEM; "": no longer) beside the
	// system's roots, through the bundle its environment names (SSL_CERT_FILE and the
	// like); answers OK.
	OpTrust = "trust"
	// OpEgress opens a stream the guest starts (never the server): one connection to the
	// sandbox's egress proxy.
	OpEgress = "egress"
	// OpCheckpoint readies the guest for a checkpoint of its sandbox: it stops listening
	// (a listener, or a connection, on a host socket cannot be checkpointed), answers OK and
	// closes the connection. It listens again when it gets SIGUSR1 (from the backend, after
	// a restore, or after a checkpoint that left the sandbox running). A guest serving on
	// stdio refuses (failed_precondition).
	OpCheckpoint = "checkpoint"
	// OpComplete asks the kernel's completer (Request.Complete); answers Completion.
	// OpInspect asks its inspector (Request.Inspect); answers Inspection. OpIsComplete
	// asks whether Request.Code is ready to run; answers IsComplete. Each waits for no
	// cell: the server sends them in the session's turn.
	OpComplete   = "complete"
	OpInspect    = "inspect"
	OpIsComplete = "is_complete"
)

// EgressListen is where the guest serves the egress proxy inside a sandbox that has its
// own network namespace, for HTTP (CONNECT and absolute-form requests) and SOCKS5 alike.
const EgressListen = "127.0.0.1:3128"

// Request is the first line the server writes on a stream.
type Request struct {
	Op string `json:"op"`
	// Hello: the server's protocol version.
	Version int `json:"version,omitempty"`
	// Execute, Command: the run's id, chosen by the server. Interrupt: the run to stop,
	// whether it is going or has not arrived yet; "" stops the running cell.
	RunID string `json:"run_id,omitempty"`
	// Configure.
	Config *Config `json:"config,omitempty"`
	// Execute.
	Execute *api.ExecuteRequest `json:"execute,omitempty"`
	// Execute: run the code as the server's, not the user's: not counted (the execution
	// count stays), not in the kernel's history (In, Out, _); its outputs are kept as a
	// cell's. A tool's call and a saved tool's load run so.
	Quiet bool `json:"quiet,omitempty"`
	// Execute: input() and getpass() in the cell ask the server: the guest sends an Input
	// message on the stream, and the server answers each with one InputReply line. Without
	// it they fail at once (StdinNotImplementedError).
	Stdin bool `json:"stdin,omitempty"`
	// Execute: report where the cell's time went, Message.Trace beside the Result. The
	// client asks only a guest that Supports VersionTrace.
	Trace bool `json:"trace,omitempty"`
	// Command.
	Command *api.CommandRequest `json:"command,omitempty"`
	// Command: the folder the program starts in, an absolute path in the sandbox. The
	// program enters it itself, as the sandbox's user, after fork and before exec: the
	// kernel's permissions apply, and it may be outside the workspace (a symbolic link in
	// it is followed). "" means Command.Cwd, a workspace path resolved beneath the
	// workspace. Setting both is refused.
	Dir string `json:"dir,omitempty"`
	// Command: send stdout and stderr as Output messages (api.OutputStream) as they are
	// read, chunks cut at UTF-8 boundaries; the CommandResult then has no Stdout or Stderr.
	Stream bool `json:"stream,omitempty"`
	// DeleteContext: the context's name.
	Context string `json:"context,omitempty"`
	// The file ops: a workspace path as the API user gave it (relative, or absolute under
	// /mnt/data); the guest resolves it safely. Move: the source.
	Path string `json:"path,omitempty"`
	// Move: the destination, a workspace path like Path.
	To string `json:"to,omitempty"`
	// Trust: a certificate authority in PEM.
	CA string `json:"ca,omitempty"`
	// Complete, Inspect.
	Complete *api.CompleteRequest `json:"complete,omitempty"`
	Inspect  *api.InspectRequest  `json:"inspect,omitempty"`
	// IsComplete: the code.
	Code string `json:"code,omitempty"`
}

// Config is sent once after Hello and before anything else. It starts the kernel.
type Config struct {
	// Python is the interpreter for the kernel, e.g. "/usr/bin/python3".
	Python string `json:"python"`
	// Preimport is Python code run once when the kernel starts (not counted as a cell),
	// e.g. "import numpy, pandas, matplotlib".
	Preimport string `json:"preimport,omitempty"`
	// Env is added to the environment of the kernel and of commands.
	Env map[string]string `json:"env,omitempty"`
	// MaxOutputBytes caps the text (streams, text/plain, tracebacks) of one execution or
	// one command stream; past it output is dropped and Truncated set.
	MaxOutputBytes int `json:"max_output_bytes"`
	// MaxRichBytes caps the non-text outputs (images, HTML, ...) of one execution.
	MaxRichBytes int `json:"max_rich_bytes"`
	// DefaultTimeoutS applies to an execution or command that names none.
	DefaultTimeoutS float64 `json:"default_timeout_s"`
	// InterruptGraceS is how long an interrupted cell has to stop before the kernel is
	// killed and restarted.
	InterruptGraceS float64 `json:"interrupt_grace_s"`
	// MemoryMB is the sandbox's memory limit, for messages only (0: unknown).
	MemoryMB int `json:"memory_mb,omitempty"`
	// Image names the sandbox's image, for messages only ("": the host's root filesystem).
	Image string `json:"image,omitempty"`
}

// Message is one line the guest writes. Exactly one field is set, but Trace, which goes with
// a Result when the request asked for it.
type Message struct {
	Output        *api.Output        `json:"output,omitempty"`
	Tools         *ToolSet           `json:"tools,omitempty"`
	Result        *api.ExecuteResult `json:"result,omitempty"`
	Trace         *Trace             `json:"trace,omitempty"`
	CommandResult *api.CommandResult `json:"command_result,omitempty"`
	File          *api.FileInfo      `json:"file,omitempty"`
	Listing       *api.FileList      `json:"listing,omitempty"`
	Entry         *Entry             `json:"entry,omitempty"`
	Hello         *Hello             `json:"hello,omitempty"`
	OK            bool               `json:"ok,omitempty"`
	Error         *Error             `json:"error,omitempty"`
	Input         *InputRequest      `json:"input,omitempty"`
	Completion    *api.Completion    `json:"completion,omitempty"`
	Inspection    *api.Inspection    `json:"inspection,omitempty"`
	IsComplete    *api.IsComplete    `json:"is_complete,omitempty"`
}

// InputRequest is a cell's input() (or getpass(), Password) waiting for a value: the
// server answers with an InputReply line on the execute's stream.
type InputRequest struct {
	Prompt   string `json:"prompt"`
	Password bool   `json:"password,omitempty"`
}

// InputReply answers an InputRequest: the value typed, or Error (input() then raises
// EOFError with it). MaxInput caps the line.
type InputReply struct {
	Value string `json:"value"`
	Error string `json:"error,omitempty"`
}

// MaxInput caps an InputReply line, and an InputRequest's prompt.
const MaxInput = 1 << 20

// Entry describes one workspace entry, its symbolic link not followed: the answer to
// OpStat, OpMakeDir and OpMove.
type Entry struct {
	api.FileInfo
	// Mode is the permission bits with setuid, setgid and sticky (st_mode & 07777).
	Mode uint32 `json:"mode"`
	// Target is what a symbolic link points to, as written in it; "" for other types.
	Target string `json:"target,omitempty"`
	// Created, for OpMakeDir: this call made the folder (false: it was there already).
	Created bool `json:"created,omitempty"`
}

// Hello is the guest's answer to OpHello.
type Hello struct {
	Version int    `json:"version"`
	PID     int    `json:"pid"`
	UID     int    `json:"uid"`
	Root    string `json:"workspace"` // the workspace folder as the guest sees it
}

// Error is a failure of the requested operation, classified with an api.Code* value.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}
