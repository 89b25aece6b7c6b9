package agent

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/tool"
)

// Preview bounds: what a file's description may cost the model's context.
const (
	previewRows        = 5
	previewLineChars   = 300
	previewColumns     = 60
	previewColumnChars = 100
	previewMaxChars    = 4000     // one file's whole description
	countRowsBytes     = 64 << 20 // rows are counted in files up to this size
)

// FilesNote tells the model which files the user gave and what is in them: one
// DescribeFile each, under a line saying where they are.
func FilesNote(descriptions []string) string {
	if len(descriptions) == 0 {
		return ""
	}
	return "The user's files are in " + api.WorkspaceDir + ":\n" + strings.Join(descriptions, "\n")
}

// DescribeFile describes a file placed at /mnt/data/<rel> for the model: its path and size
// and, for CSV and TSV files, its rows, columns and first rows, so that the model can plan
// its analysis before it runs anything. r is the file's content; it is read at most up to
// 64 MiB (a bigger file's rows are not counted).
func DescribeFile(rel string, size int64, r io.Reader) string {
	p := path.Join(api.WorkspaceDir, rel)
	line := fmt.Sprintf("- %s (%s)", p, tool.Size(size))
	var comma rune
	switch strings.ToLower(path.Ext(rel)) {
	case ".csv":
		comma = ','
	case ".tsv", ".tab":
		comma = '\t'
	default:
		return line
	}
	desc, err := describeTable(io.LimitReader(r, countRowsBytes), comma, size <= countRowsBytes)
	if err != nil {
		return line + fmt.Sprintf(": could not be read as a table (%v); look at it before loading it", err)
	}
	return clip(line+desc, previewMaxChars)
}

func describeTable(r io.Reader, comma rune, countAll bool) (string, error) {
	head := &capped{max: 64 << 10} // the first rows' text, as in the file
	br := bufio.NewReader(io.TeeReader(r, head))
	cr := csv.NewReader(br)
	cr.Comma = comma
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return ": empty", nil
		}
		return "", err
	}
	cols := make([]string, len(header))
	for i, c := range header {
		cols[i] = clip(c, previewColumnChars)
	}
	rows := 0
	for {
		_, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", err
		}
		rows++
		if !countAll && rows >= previewRows {
			break
		}
	}
	var b strings.Builder
	if countAll {
		fmt.Fprintf(&b, ": %s rows", thousands(rows))
	} else {
		b.WriteString(": rows not counted (large file)")
	}
	shown := cols
	if len(shown) > previewColumns {
		shown = shown[:previewColumns]
	}
	fmt.Fprintf(&b, ", %d columns: %s", len(cols), strings.Join(shown, ", "))
	if len(cols) > len(shown) {
		fmt.Fprintf(&b, ", ... (%d more)", len(cols)-len(shown))
	}
	b.WriteString("\n  First rows (as in the file):\n")
	lines := strings.SplitN(head.buf.String(), "\n", previewRows+2)
	lines = lines[:min(len(lines), previewRows+1)]
	for _, l := range lines {
		l = strings.TrimRight(l, "\r")
		if l == "" {
			continue
		}
		b.WriteString("  " + clip(l, previewLineChars) + "\n")
	}
	return strings.TrimRight(b.String(), "\n"), nil
}

// clip cuts s to at most n bytes (at a character boundary), marking the cut with " ...".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return tool.Prefix(s, n) + " ..."
}

// capped keeps the first max bytes written to it and drops the rest.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// thousands writes n with commas: 8,000.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
