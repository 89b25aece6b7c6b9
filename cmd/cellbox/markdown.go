package main

// A line-by-line Markdown renderer for the terminal, so a model's answer reads as text:
// headings and **bold** in bold, bullets as •, code blocks indented, links as "text (url)".
// It renders as the text streams in, one whole line at a time.

import (
	"io"
	"regexp"
	"strings"
)

type markdown struct {
	w       io.Writer
	color   bool
	partial []byte
	inFence bool
}

func newMarkdown(w io.Writer, color bool) *markdown { return &markdown{w: w, color: color} }

func (m *markdown) Write(p []byte) (int, error) {
	m.partial = append(m.partial, p...)
	for {
		i := strings.IndexByte(string(m.partial), '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(m.partial[:i])
		m.partial = m.partial[i+1:]
		if _, err := io.WriteString(m.w, m.line(line)+"\n"); err != nil {
			return len(p), err
		}
	}
}

// Flush renders what is left after the last newline, and ends the line.
func (m *markdown) Flush() {
	if len(m.partial) > 0 {
		io.WriteString(m.w, m.line(string(m.partial))+"\n")
		m.partial = m.partial[:0]
	}
	m.inFence = false
}

var (
	mdHeading = regexp.MustCompile(`^(#{1,6})\s+(.*)$`)
	mdBullet  = regexp.MustCompile(`^(\s*)[-*+]\s+(.*)$`)
	mdBold    = regexp.MustCompile(`\*\*([^*]+)\*\*|__([^_]+)__`)
	mdLink    = regexp.MustCompile(`\[([^\]]+)\]\(([^)\s]+)\)`)
)

const (
	ansiBold  = "\x1b[1m"
	ansiDim   = "\x1b[2m"
	ansiReset = "\x1b[0m"
)

func (m *markdown) line(l string) string {
	l = strings.TrimRight(l, "\r")
	if strings.HasPrefix(strings.TrimSpace(l), "```") {
		m.inFence = !m.inFence
		return ""
	}
	if m.inFence {
		return "    " + m.style(ansiDim, l)
	}
	if h := mdHeading.FindStringSubmatch(l); h != nil {
		return m.style(ansiBold, m.inline(h[2], false))
	}
	if b := mdBullet.FindStringSubmatch(l); b != nil {
		return b[1] + "  • " + m.inline(b[2], true)
	}
	return m.inline(l, true)
}

func (m *markdown) inline(s string, bold bool) string {
	s = mdLink.ReplaceAllString(s, "$1 ($2)")
	return mdBold.ReplaceAllStringFunc(s, func(x string) string {
		inner := x[2 : len(x)-2]
		if bold {
			return m.style(ansiBold, inner)
		}
		return inner
	})
}

func (m *markdown) style(code, s string) string {
	if !m.color || s == "" {
		return s
	}
	return code + s + ansiReset
}
