package tool

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/cellbox/cellbox/api"
)

// Result is a tool call's result as a model gets it.
type Result struct {
	Text    string  // what the code printed, showed and raised, its files, its status
	Images  []Image // plots and other images, in order
	IsError bool    // the code failed: raised, timed out, ran out of memory, ...

	// What the call returned, for programs (one of them is set).
	Execute *api.ExecuteResult
	Command *api.CommandResult
	Tool    *api.ToolCallResult // a session tool's
}

// Image is one image of a result. Data is base64, as every model API takes it.
type Image struct {
	MIME string
	Data string
}

// RenderLimits bound what a result puts in a model's context. Zero values take defaults.
type RenderLimits struct {
	MaxText       int // characters of printed output; past it, the middle is cut (default 20,000)
	MaxImages     int // images per result (default 4)
	MaxImageBytes int // one image, base64-encoded (default 5 MiB: Anthropic's limit, counted on the encoded data)
}

func (l RenderLimits) withDefaults() RenderLimits {
	if l.MaxText <= 0 {
		l.MaxText = 20000
	}
	if l.MaxImages <= 0 {
		l.MaxImages = 4
	}
	if l.MaxImageBytes <= 0 {
		l.MaxImageBytes = 5 << 20
	}
	return l
}

// imageMIMEs are the image types the model APIs accept, best first. SVG is not one of them:
// a figure saved as SVG reaches the model as its text/plain representation.
var imageMIMEs = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// RenderExecute writes an execution's result for a model: outputs in order (stderr and
// results labelled), the traceback whole, then anything the status says, then the files
// the code changed. Printed output past the limit is cut in the middle.
func RenderExecute(res *api.ExecuteResult, limits RenderLimits) *Result {
	return renderRun(run{res.Status, res.Message, res.Outputs, res.Files, res.Truncated}, "",
		"(the code ran and printed nothing; the value of a last expression or print() shows results)", limits)
}

// RenderToolCall writes a session tool's result for a model: its return value
// (ReturnValue), then what it printed, showed and raised, its status and files, as
// RenderExecute does.
func RenderToolCall(res *api.ToolCallResult, limits RenderLimits) *Result {
	lead := ReturnValue(res, limits)
	switch {
	case res.HasValue:
		lead = "Returned: " + lead
	case lead != "":
		lead = "Returned " + lead
	}
	return renderRun(run{res.Status, res.Message, res.Outputs, res.Files, res.Truncated}, lead,
		"(the tool ran, printed nothing and returned no value)", limits)
}

// ReturnValue writes a session tool's return value for a model: its JSON, or when JSON
// cannot hold it, its type and repr ("a value of type set that JSON cannot hold; its repr:
// {1, 2}"); "" when it returned none. Past the limit, the middle is cut.
func ReturnValue(res *api.ToolCallResult, limits RenderLimits) string {
	l := limits.withDefaults()
	switch {
	case res.HasValue:
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(res.Value); err != nil { // not from a decoded result
			b.Reset()
			fmt.Fprintf(&b, "%v", res.Value)
		}
		return trimMiddle(strings.TrimRight(b.String(), "\n"), l.MaxText)
	case res.Text != "" || res.ValueType != "":
		return fmt.Sprintf("a value of type %s that JSON cannot hold; its repr: %s", res.ValueType, trimMiddle(res.Text, l.MaxText))
	}
	return ""
}

// run is what RenderExecute and RenderToolCall write of a run in a kernel.
type run struct {
	status, message string
	outputs         []api.Output
	files           []api.FileChange
	truncated       bool
}

// renderRun writes a run for a model: lead (already within the limits) first, then its
// outputs, status and files; empty when there is nothing at all.
func renderRun(res run, lead, empty string, limits RenderLimits) *Result {
	l := limits.withDefaults()
	out := &Result{IsError: res.status != api.StatusOK}
	var body, tail strings.Builder
	lastStream := ""
	skipped := 0
	for _, o := range res.outputs {
		switch o.Type {
		case api.OutputStream:
			if o.Name == "stderr" && lastStream != "stderr" {
				ensureNewline(&body)
				body.WriteString("[stderr]\n")
			} else if o.Name != "stderr" && lastStream == "stderr" {
				ensureNewline(&body)
				body.WriteString("[stdout]\n")
			}
			lastStream = o.Name
			body.WriteString(o.Text)
		case api.OutputExecuteResult, api.OutputDisplayData:
			lastStream = ""
			if img, ok, why := pickImage(o.Data, l.MaxImageBytes); ok {
				if len(out.Images) < l.MaxImages {
					out.Images = append(out.Images, img)
					ensureNewline(&body)
					fmt.Fprintf(&body, "[image %d: %s, attached]\n", len(out.Images), img.MIME)
					continue
				}
				skipped++
			} else if why != "" {
				ensureNewline(&body)
				fmt.Fprintf(&body, "[an image was left out: %s]\n", why)
			}
			text := richText(o.Data)
			if text == "" {
				continue
			}
			ensureNewline(&body)
			if o.Type == api.OutputExecuteResult && o.ExecutionCount > 0 {
				fmt.Fprintf(&body, "Out[%d]: ", o.ExecutionCount)
			}
			body.WriteString(text)
			ensureNewline(&body)
		case api.OutputError:
			lastStream = ""
			tb := strings.Join(o.Traceback, "\n")
			if strings.TrimSpace(tb) == "" {
				tb = o.EName + ": " + o.EValue
			}
			ensureNewline(&tail)
			tail.WriteString(trimMiddle(strings.TrimRight(tb, "\n"), l.MaxText))
			tail.WriteString("\n")
		}
	}
	if skipped > 0 {
		fmt.Fprintf(&tail, "[%d more image(s) left out: at most %d per call]\n", skipped, l.MaxImages)
	}
	if res.truncated {
		tail.WriteString("[the output was longer than the server keeps, and was cut]\n")
	}
	switch res.status {
	case api.StatusOK, api.StatusError:
		if res.message != "" {
			fmt.Fprintf(&tail, "%s\n", res.message)
		}
	default:
		msg := res.message
		if msg == "" {
			msg = "the execution did not finish"
		}
		fmt.Fprintf(&tail, "Status: %s: %s\n", res.status, msg)
	}
	writeFiles(&tail, res.files)
	text := ensureNL(lead) + trimMiddle(body.String(), l.MaxText)
	if text != "" && tail.Len() > 0 {
		text = ensureNL(text)
	}
	text += tail.String()
	if strings.TrimSpace(text) == "" {
		text = empty
	}
	out.Text = strings.TrimRight(text, "\n")
	return out
}

// RenderCommand writes a command's result for a model: the exit code, stdout, stderr, the
// status's message and the files it changed.
func RenderCommand(res *api.CommandResult, limits RenderLimits) *Result {
	l := limits.withDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "exit code %d\n", res.ExitCode)
	if res.Stdout != "" {
		b.WriteString(ensureNL(trimMiddle(res.Stdout, l.MaxText)))
	}
	if res.Stderr != "" {
		b.WriteString("[stderr]\n")
		b.WriteString(ensureNL(trimMiddle(res.Stderr, l.MaxText)))
	}
	if res.Truncated {
		b.WriteString("[the output was longer than the server keeps, and was cut]\n")
	}
	if res.Status != api.StatusOK && res.Status != api.StatusError || res.Message != "" {
		msg := res.Message
		if msg == "" {
			msg = "the command did not finish"
		}
		fmt.Fprintf(&b, "Status: %s: %s\n", res.Status, msg)
	}
	writeFiles(&b, res.Files)
	return &Result{Text: strings.TrimRight(b.String(), "\n"), IsError: res.Status != api.StatusOK}
}

// maxFilesListed bounds the file list of one result.
const maxFilesListed = 50

func writeFiles(b *strings.Builder, files []api.FileChange) {
	if len(files) == 0 {
		return
	}
	b.WriteString("Files changed:\n")
	for i, f := range files {
		if i == maxFilesListed {
			fmt.Fprintf(b, "- ... and %d more\n", len(files)-i)
			break
		}
		if f.Change == api.ChangeDeleted {
			fmt.Fprintf(b, "- %s (deleted)\n", f.Path)
			continue
		}
		fmt.Fprintf(b, "- %s (%s, %s)", f.Path, f.Change, Size(f.Size))
		if f.URL != "" {
			fmt.Fprintf(b, ", link for the user: %s", f.URL)
		}
		b.WriteString("\n")
	}
}

// Prefix is s cut to at most n bytes, at a character boundary.
func Prefix(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:max(n, 0)]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// Size writes a byte count for a person or a model: 812 B, 20.5 kB, 3.1 MB.
func Size(n int64) string {
	switch {
	case n < 1000:
		return fmt.Sprintf("%d B", n)
	case n < 1000*1000:
		return fmt.Sprintf("%.1f kB", float64(n)/1000)
	case n < 1000*1000*1000:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%.1f GB", float64(n)/1e9)
}

// pickImage returns the best image of a MIME bundle the model APIs accept. ok is false when
// there is none; why then says why an image there was left out ("" when there was none).
func pickImage(data map[string]any, maxBytes int) (img Image, ok bool, why string) {
	for _, m := range imageMIMEs {
		s, isStr := data[m].(string)
		if !isStr {
			continue
		}
		s = strings.Join(strings.Fields(s), "") // base64 may be wrapped
		if _, err := base64.StdEncoding.DecodeString(s); err != nil {
			return Image{}, false, m + " data that is not valid base64"
		}
		if len(s) > maxBytes {
			return Image{}, false, fmt.Sprintf("a %s of %s (base64), over the %s a model takes; save it to a file instead, or plot at a lower dpi", m, Size(int64(len(s))), Size(int64(maxBytes)))
		}
		return Image{MIME: m, Data: s}, true, ""
	}
	return Image{}, false, ""
}

// richText is the text a model reads of a MIME bundle: plain text, else Markdown, else
// nothing (HTML and the like would cost many tokens and say what text/plain says).
func richText(data map[string]any) string {
	for _, m := range []string{"text/plain", "text/markdown"} {
		if s, ok := data[m].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// trimMiddle keeps the head and the tail of s within about max bytes, cutting at
// line ends where it can, and says in the middle how much was cut.
func trimMiddle(s string, max int) string {
	if len(s) <= max {
		return s
	}
	headLen, tailLen := max*2/5, max*3/5 // the end of output (the latest, the error) matters most
	head := s[:headLen]
	if i := strings.LastIndexByte(head, '\n'); i > headLen/2 {
		head = head[:i+1]
	}
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	tail := s[len(s)-tailLen:]
	if i := strings.IndexByte(tail, '\n'); i >= 0 && i < tailLen/2 {
		tail = tail[i+1:]
	}
	for len(tail) > 0 && !utf8.RuneStart(tail[0]) {
		tail = tail[1:]
	}
	cut := len(s) - len(head) - len(tail)
	return fmt.Sprintf("%s[... %s cut from the middle of the output ...]\n%s", ensureNL(head), Size(int64(cut)), tail)
}

func ensureNewline(b *strings.Builder) {
	if s := b.String(); s != "" && !strings.HasSuffix(s, "\n") {
		b.WriteString("\n")
	}
}

func ensureNL(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		return s + "\n"
	}
	return s
}
