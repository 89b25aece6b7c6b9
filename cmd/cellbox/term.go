package main

import (
	"fmt"
	"strings"
)

// termSafe makes text from a model or a sandbox safe to print on a terminal: control
// characters other than newline and tab (and carriage return, with keepCR) are shown as
// visible escapes (ESC as ^[, U+009B as <U+009B>) instead of being obeyed. Otherwise a model
// (steered by the data it reads) could move the cursor and rewrite the code shown at the
// approval prompt, set the clipboard (OSC 52) or the window title.
func termSafe(s string, keepCR bool) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return unsafeRune(r, keepCR) }) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case !unsafeRune(r, keepCR):
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString("^" + string(rune(r+'@')))
		case r == 0x7f:
			b.WriteString("^?")
		default:
			fmt.Fprintf(&b, "<U+%04X>", r)
		}
	}
	return b.String()
}

func unsafeRune(r rune, keepCR bool) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r == '\r':
		return !keepCR
	}
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f)
}
