// Package llmtest runs stand-ins for the OpenAI Chat Completions, OpenAI Responses and
// Anthropic Messages APIs for tests: real HTTP servers (httptest) that speak the real wire
// formats, JSON and SSE streams, answer as a test's Script says, and record every request.
// The Responses stand-in keeps nothing between requests (a client sends store false and the
// whole conversation each time).
//
// A server checks requests as the real API would where that is cheap (the API key, required
// fields, every tool call answered by a result with its id, ...) and answers a bad one with
// 400 in the API's error shape, so a broken mapping fails a test instead of passing it. It
// decodes each request into a provider-neutral Request (llm.Message values, tool results with
// their text and images) for the script and for the test's assertions.
//
// Suite is the conformance suite that every llm.Provider passes against its server.
//
// Not for: anything but tests. Only _test.go files import it.
package llmtest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/cellbox/cellbox/internal/llm"
	"github.com/cellbox/cellbox/internal/tool"
)

// Script answers one request. It runs in the server's handler, so it may be called from
// several goroutines at once; one that blocks must return when the test ends.
type Script func(r Request) Reply

// Request is one request that reached a server, decoded into the provider-neutral shape.
type Request struct {
	Model    string
	System   string
	Messages []llm.Message // tool results carry their text and images as the model got them
	Tools    []tool.Definition
	// ToolChoice is the request's tool_choice: "none", "auto", ... (the JSON text for an
	// object other than Anthropic's {"type": ...}); "" when the request did not set it.
	ToolChoice string
	MaxTokens  int         // max_completion_tokens (or max_tokens); 0 when not set
	Stream     bool        // the request asked for an SSE stream
	Header     http.Header // as received
	Body       []byte      // the raw JSON body
	// Refused is the error the server answered without asking the script (a wrong key, a
	// request the real API would refuse); "" when the script answered.
	Refused string
}

// Reply is a script's answer: text and/or tool calls, or an HTTP error.
type Reply struct {
	Text string
	// ToolCalls: an empty ID gets one made up; Input is the arguments' JSON ("" means {}).
	// The OpenAI server sends any Input as is, to play a model that writes broken JSON.
	ToolCalls []llm.ToolCall
	// StopReason is llm.StopEnd, llm.StopToolUse or llm.StopMaxTokens, sent in the API's
	// words; "" says tool use when there are tool calls, else end.
	StopReason string
	Usage      llm.Usage // zero: estimated from the sizes of the request and the reply
	// Status, when set, makes the server answer with this HTTP status and Error as the
	// message, in the API's error shape (429 and 5xx with retry-after-ms: 1).
	Status int
	Error  string
}

// Text is a reply with text.
func Text(s string) Reply { return Reply{Text: s} }

// CallTool is a reply with one call of tool name with the JSON arguments args.
func CallTool(name, args string) Reply {
	return Reply{ToolCalls: []llm.ToolCall{{Name: name, Input: json.RawMessage(args)}}}
}

// Fail is an HTTP error reply.
func Fail(status int, message string) Reply { return Reply{Status: status, Error: message} }

// Replies is a script that answers the n-th request with the n-th reply, and any request
// past the end with a 400 that says so.
func Replies(replies ...Reply) Script {
	var mu sync.Mutex
	n := 0
	return func(Request) Reply {
		mu.Lock()
		defer mu.Unlock()
		n++
		if n > len(replies) {
			return Fail(http.StatusBadRequest, fmt.Sprintf("llmtest: the script has no reply for request %d", n))
		}
		return replies[n-1]
	}
}

// DefaultKey is the API key a new server takes.
const DefaultKey = "sk-llmtest-0123456789abcdef"

// Server is a running stand-in API. It is closed when the test ends.
type Server struct {
	// URL is the base URL to give a provider: for OpenAI it ends in /v1 (the SDK appends
	// /chat/completions or /responses), for Anthropic it is the host (the SDK appends
	// /v1/messages).
	URL string
	// Key is the API key that requests must carry (Authorization: Bearer for OpenAI,
	// x-api-key for Anthropic); "" takes requests without one, like a local server. Change
	// it before the first request.
	Key string

	t      testing.TB
	script Script
	api    wireAPI
	mu     sync.Mutex
	reqs   []Request
}

// wireAPI is one API's side of a server.
type wireAPI interface {
	path() string
	key(h http.Header) string
	// header checks the other headers the API requires; "" when they are fine.
	header(h http.Header) string
	// decode checks a request body as the real API would and decodes it; the error is the
	// message of a 400.
	decode(body []byte) (Request, error)
	writeError(w http.ResponseWriter, status int, msg string)
	writeReply(w http.ResponseWriter, req Request, rep Reply, n int)
}

// NewOpenAI starts a stand-in for OpenAI's Chat Completions API (POST {URL}/chat/completions).
func NewOpenAI(t testing.TB, script Script) *Server {
	return start(t, script, openaiAPI{}, "/v1")
}

// NewAnthropic starts a stand-in for Anthropic's Messages API (POST {URL}/v1/messages).
func NewAnthropic(t testing.TB, script Script) *Server {
	return start(t, script, anthropicAPI{}, "")
}

func start(t testing.TB, script Script, api wireAPI, base string) *Server {
	t.Helper()
	s := &Server{Key: DefaultKey, t: t, script: script, api: api}
	ts := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(ts.Close)
	s.URL = ts.URL + base
	return s
}

// Requests returns the requests so far, in order, refused ones too.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 256<<20))
	if err != nil {
		return
	}
	req := Request{Header: r.Header.Clone(), Body: body}
	refuse := func(status int, msg string) {
		req.Refused = msg
		s.record(req)
		s.t.Logf("llmtest: refused a request with %d: %s", status, msg)
		s.api.writeError(w, status, msg)
	}
	if r.Method != http.MethodPost || r.URL.Path != s.api.path() {
		refuse(http.StatusNotFound, fmt.Sprintf("llmtest: no route %s %s; the API is POST %s", r.Method, r.URL.Path, s.api.path()))
		return
	}
	if s.Key != "" && s.api.key(r.Header) != s.Key {
		refuse(http.StatusUnauthorized, "Incorrect API key provided.")
		return
	}
	if msg := s.api.header(r.Header); msg != "" {
		refuse(http.StatusBadRequest, msg)
		return
	}
	decoded, err := s.api.decode(body)
	if err != nil {
		req.Model, req.Stream = decoded.Model, decoded.Stream
		refuse(http.StatusBadRequest, err.Error())
		return
	}
	decoded.Header, decoded.Body = req.Header, body
	n := s.record(decoded)
	rep := s.script(decoded)
	if rep.Status != 0 {
		if rep.Status == http.StatusTooManyRequests || rep.Status >= 500 {
			w.Header().Set("retry-after-ms", "1") // a retrying test need not wait
		}
		s.api.writeError(w, rep.Status, rep.Error)
		return
	}
	if rep.StopReason == "" {
		rep.StopReason = llm.StopEnd
		if len(rep.ToolCalls) > 0 {
			rep.StopReason = llm.StopToolUse
		}
	}
	if rep.Usage == (llm.Usage{}) {
		out := len(rep.Text)
		for _, c := range rep.ToolCalls {
			out += len(c.Input)
		}
		rep.Usage = llm.Usage{InputTokens: len(body)/4 + 1, OutputTokens: out/4 + 1}
	}
	rep.ToolCalls = append([]llm.ToolCall(nil), rep.ToolCalls...)
	for i := range rep.ToolCalls {
		if len(rep.ToolCalls[i].Input) == 0 {
			rep.ToolCalls[i].Input = json.RawMessage("{}")
		}
	}
	s.api.writeReply(w, decoded, rep, n)
}

// record keeps a request and returns its number, from 1.
func (s *Server) record(r Request) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs = append(s.reqs, r)
	return len(s.reqs)
}

// pieces cuts s into pieces of about n bytes, at rune boundaries, so that streams carry a
// text or a call's arguments in several deltas.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > n {
		i := n
		for i < len(s) && !utf8.RuneStart(s[i]) {
			i++
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

// decodeImage checks base64 image data as the APIs do.
func decodeImage(mime, data string) (tool.Image, error) {
	switch mime {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
	default:
		return tool.Image{}, fmt.Errorf("image media type %q is not one of image/jpeg, image/png, image/gif, image/webp", mime)
	}
	if _, err := base64.StdEncoding.DecodeString(data); err != nil || data == "" {
		return tool.Image{}, fmt.Errorf("the image data is not valid base64")
	}
	return tool.Image{MIME: mime, Data: data}, nil
}

// textOrParts decodes a content field that is a string, null, or an array.
func textOrParts(raw json.RawMessage, parts any) (text string, isParts bool, err error) {
	raw = bytes.TrimSpace(raw)
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "", false, nil
	case raw[0] == '"':
		err := json.Unmarshal(raw, &text)
		return text, false, err
	case raw[0] == '[':
		return "", true, json.Unmarshal(raw, parts)
	}
	return "", false, fmt.Errorf("content must be a string or an array")
}

// writeJSON writes v with a status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sse writes server-sent events.
type sse struct {
	w http.ResponseWriter
}

func newSSE(w http.ResponseWriter) sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return sse{w}
}

// event writes one event; name "" writes a data line only (OpenAI's style).
func (s sse) event(name string, data any) {
	var b strings.Builder
	if name != "" {
		fmt.Fprintf(&b, "event: %s\n", name)
	}
	if str, ok := data.(string); ok {
		fmt.Fprintf(&b, "data: %s\n\n", str)
	} else {
		js, _ := json.Marshal(data)
		fmt.Fprintf(&b, "data: %s\n\n", js)
	}
	_, _ = io.WriteString(s.w, b.String())
	if f, ok := s.w.(http.Flusher); ok {
		f.Flush()
	}
}

// joinText joins non-empty texts with blank lines.
func joinText(texts []string) string {
	var keep []string
	for _, t := range texts {
		if t != "" {
			keep = append(keep, t)
		}
	}
	return strings.Join(keep, "\n\n")
}

// validName is the tool name rule of both APIs.
func validName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
