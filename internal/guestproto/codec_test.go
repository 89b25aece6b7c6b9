package guestproto

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReadLine(t *testing.T) {
	tests := []struct {
		in   string
		max  int
		want []string
		err  error
	}{
		{in: "a\nbb\n", max: 10, want: []string{"a", "bb"}, err: io.EOF},
		{in: "abc", max: 10, err: io.ErrUnexpectedEOF},
		{in: strings.Repeat("x", 11) + "\n", max: 10, err: ErrMessageTooLarge},
		{in: strings.Repeat("x", 10) + "\n", max: 10, want: []string{strings.Repeat("x", 10)}, err: io.EOF},
		{in: strings.Repeat("y", 100000) + "\n", max: 200000, want: []string{strings.Repeat("y", 100000)}, err: io.EOF},
	}
	for _, tt := range tests {
		br := bufio.NewReaderSize(strings.NewReader(tt.in), 16)
		var got []string
		var err error
		for {
			var line []byte
			if line, err = ReadLine(br, tt.max); err != nil {
				break
			}
			got = append(got, string(line))
		}
		if !errors.Is(err, tt.err) || strings.Join(got, "|") != strings.Join(tt.want, "|") {
			t.Errorf("ReadLine(%.20q, %d) = %q, %v; want %q, %v", tt.in, tt.max, got, err, tt.want, tt.err)
		}
	}
}

func TestChunkRoundTrip(t *testing.T) {
	var b bytes.Buffer
	w := ChunkWriter{W: &b}
	body := bytes.Repeat([]byte("0123456789"), MaxChunk/5) // two chunks and more
	w.Write(body)
	w.Close()
	b.WriteString("trailing bytes belong to the next reader")
	got, err := io.ReadAll(&ChunkReader{R: &b})
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("round trip: %d bytes, %v; want %d bytes", len(got), err, len(body))
	}
	// Without the end chunk the upload is aborted, however much arrived.
	var cut bytes.Buffer
	ChunkWriter{W: &cut}.Write([]byte("partial"))
	if _, err := io.ReadAll(&ChunkReader{R: &cut}); !errors.Is(err, ErrAborted) {
		t.Fatalf("no end chunk: %v, want ErrAborted", err)
	}
	// A header claiming more than MaxChunk is refused before anything is read.
	if _, err := io.ReadAll(&ChunkReader{R: bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff})}); err == nil || errors.Is(err, ErrAborted) {
		t.Fatalf("oversized chunk: %v", err)
	}
}

// FuzzChunkReader: whatever the bytes, the reader never panics, never returns more bytes
// than the stream held, and ends cleanly only where an end chunk fits.
func FuzzChunkReader(f *testing.F) {
	var seed bytes.Buffer
	w := ChunkWriter{W: &seed}
	w.Write([]byte("hello"))
	w.Close()
	f.Add(seed.Bytes())
	f.Add([]byte{0, 0, 0, 5, 'a'})
	f.Add([]byte{0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		got, err := io.ReadAll(&ChunkReader{R: bytes.NewReader(in)})
		if len(got) > len(in) {
			t.Fatalf("read %d bytes from %d", len(got), len(in))
		}
		if err == nil && len(in) < 4+len(got) {
			t.Fatalf("clean end without room for an end chunk: %x", in)
		}
	})
}
