package guest

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/guestproto"
)

// maxOutputLine caps one output as the guest sends it: it must fit a protocol line.
const maxOutputLine = guestproto.MaxMessageSize - 64<<10

// maxEValue caps the message of an error output.
const maxEValue = 4096

// budget applies Config.MaxOutputBytes and Config.MaxRichBytes to one execution's outputs.
// Text (streams, text/plain, tracebacks) and rich data (every other MIME type) are counted
// apart. What does not fit is dropped and counted, for the marker output at the end.
type budget struct {
	textLeft, richLeft int
	textMax, richMax   int

	textCut   int64  // bytes of text dropped
	cutStream string // the stream that was cut first, for the marker
	richCut   int64  // bytes of rich data dropped
	richCutN  int    // outputs that lost their rich data

	toolResult bool // a tool's return value was let through outside the rich budget
}

func newBudget(textMax, richMax int) *budget {
	return &budget{textLeft: textMax, richLeft: richMax, textMax: textMax, richMax: richMax}
}

func (b *budget) truncated() bool { return b.textCut > 0 || b.richCut > 0 }

// text keeps what fits of s (cut at a rune boundary) and counts the rest as dropped.
func (b *budget) text(s []byte, stream string) []byte {
	if len(s) <= b.textLeft {
		b.textLeft -= len(s)
		return s
	}
	keep := runeCut(s, b.textLeft)
	b.textLeft -= keep
	b.textCut += int64(len(s) - keep)
	if b.cutStream == "" {
		b.cutStream = stream
	}
	if b.textLeft < utf8.UTFMax {
		b.textLeft = 0 // a cut rune must not slip in later
	}
	return s[:keep]
}

// runeCut returns the largest n <= max such that s[:n] does not end inside a UTF-8 rune.
func runeCut(s []byte, max int) int {
	if max >= len(s) {
		return len(s)
	}
	n := max
	for n > 0 && n > max-utf8.UTFMax && !utf8.RuneStart(s[n]) {
		n--
	}
	if n > 0 && !utf8.RuneStart(s[n]) {
		return max // not UTF-8 anyway
	}
	return n
}

// completeUTF8 returns how much of s can be sent without splitting a rune at its end;
// the rest is kept for the next read.
func completeUTF8(s []byte) int {
	for i := 1; i <= utf8.UTFMax && i <= len(s); i++ {
		c := s[len(s)-i]
		if c < utf8.RuneSelf {
			return len(s) // ASCII at the end: complete
		}
		if utf8.RuneStart(c) {
			if utf8.FullRune(s[len(s)-i:]) {
				return len(s)
			}
			return len(s) - i
		}
	}
	return len(s)
}

// rich applies the budgets to a display_data, execute_result or error output. It returns
// false when nothing of the output is left to send.
func (b *budget) rich(o *api.Output) bool {
	switch o.Type {
	case api.OutputError:
		if len(o.EValue) > maxEValue {
			n := runeCut([]byte(o.EValue), maxEValue)
			b.textCut += int64(len(o.EValue) - n)
			o.EValue = o.EValue[:n] + "..."
		}
		o.Traceback = b.traceback(o.Traceback)
		return true
	case api.OutputDisplayData, api.OutputExecuteResult, api.OutputUpdateDisplay:
	case api.OutputClear:
		*o = api.Output{Type: api.OutputClear, Wait: o.Wait}
		return true
	default:
		return false // the runner sends nothing else
	}
	// A tool call's return value, which module cellbox bounds, is its result rather than one
	// of its outputs: plots the call drew first do not cost it. Once a run.
	if v, ok := o.Data[guestproto.ToolResultMIME]; ok && len(o.Data) == 1 && !b.toolResult && valueSize(v) <= guestproto.MaxToolResult {
		b.toolResult = true
		o.Metadata = nil
		return true
	}
	size := 0
	for mime, v := range o.Data {
		if mime != "text/plain" {
			size += valueSize(v)
		}
	}
	if size > 0 && (size > b.richLeft || size > maxOutputLine/2) {
		for mime := range o.Data {
			if mime != "text/plain" {
				delete(o.Data, mime)
			}
		}
		o.Metadata = nil
		b.richCut += int64(size)
		b.richCutN++
	} else {
		b.richLeft -= size
	}
	if v, ok := o.Data["text/plain"]; ok {
		s, _ := v.(string)
		kept := b.text([]byte(s), "stdout")
		if len(kept) == 0 && len(s) > 0 {
			delete(o.Data, "text/plain")
		} else {
			o.Data["text/plain"] = string(kept)
		}
	}
	return len(o.Data) > 0
}

// traceback keeps the last lines of tb that fit the text budget: the end of a traceback
// says what went wrong.
func (b *budget) traceback(tb []string) []string {
	total := 0
	for _, l := range tb {
		total += len(l)
	}
	if total <= b.textLeft {
		b.textLeft -= total
		return tb
	}
	var keep []string
	used := 0
	for i := len(tb) - 1; i >= 0; i-- {
		if used+len(tb[i]) > b.textLeft {
			break
		}
		used += len(tb[i])
		keep = append(keep, tb[i])
	}
	b.textLeft -= used
	b.textCut += int64(total - used)
	if b.cutStream == "" {
		b.cutStream = "stderr"
	}
	out := make([]string, 0, len(keep)+1)
	out = append(out, fmt.Sprintf("[... %d traceback lines cut by cellbox's output limit ...]", len(tb)-len(keep)))
	for i := len(keep) - 1; i >= 0; i-- {
		out = append(out, keep[i])
	}
	return out
}

// valueSize is v's size as JSON, unescaped for HTML as the runner writes it.
func valueSize(v any) int {
	if s, ok := v.(string); ok {
		return len(s)
	}
	var c countWriter
	enc := json.NewEncoder(&c)
	enc.SetEscapeHTML(false)
	if enc.Encode(v) != nil {
		return 0
	}
	return int(c) - 1 // Encode's newline
}

type countWriter int

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}

// marker is the output that says what the limits cut, or nil when nothing was cut.
func (b *budget) marker() *api.Output {
	if !b.truncated() {
		return nil
	}
	var parts []string
	if b.textCut > 0 {
		parts = append(parts, fmt.Sprintf("%s of text not shown (limit %s per execution)",
			byteSize(b.textCut), byteSize(int64(b.textMax))))
	}
	if b.richCut > 0 {
		parts = append(parts, fmt.Sprintf("%d rich output(s) (%s: images, HTML, ...) dropped (limit %s per execution)",
			b.richCutN, byteSize(b.richCut), byteSize(int64(b.richMax))))
	}
	name := b.cutStream
	if name == "" {
		name = "stderr"
	}
	return &api.Output{Type: api.OutputStream, Name: name,
		Text: "\n[cellbox: output truncated: " + strings.Join(parts, "; ") + "]\n"}
}

// byteSize writes n for a person: "812 bytes", "1.5 MiB".
func byteSize(n int64) string {
	switch {
	case n < 10<<10:
		return fmt.Sprintf("%d bytes", n)
	case n < 10<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	default:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
}
