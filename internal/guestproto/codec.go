package guestproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrMessageTooLarge is returned for a line longer than the cap.
var ErrMessageTooLarge = errors.New("guest protocol message too large")

// ReadLine reads one '\n'-terminated line of at most max bytes (without the newline).
// The returned slice is only valid until the next read from br.
func ReadLine(br *bufio.Reader, max int) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > max+1 {
			return nil, ErrMessageTooLarge
		}
		switch {
		case err == nil:
			if buf == nil {
				return chunk[:len(chunk)-1], nil
			}
			buf = append(buf, chunk...)
			return buf[:len(buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			buf = append(buf, chunk...)
		case errors.Is(err, io.EOF) && len(buf)+len(chunk) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// ReadJSON reads one line of at most max bytes and decodes it into v.
func ReadJSON(br *bufio.Reader, max int, v any) error {
	line, err := ReadLine(br, max)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(line, v); err != nil {
		return fmt.Errorf("decode guest protocol message: %w", err)
	}
	return nil
}

// WriteJSON writes v as one JSON line.
func WriteJSON(w io.Writer, v any) error {
	b, err := jsonLine(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// jsonLine is v as WriteJSON writes it, its newline included.
func jsonLine(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// MaxChunk caps one chunk of an uploaded file's body.
const MaxChunk = 1 << 20

// ErrAborted is returned by a ChunkReader whose stream ended without the end chunk: the
// sender gave up, and what arrived must not be kept.
var ErrAborted = errors.New("upload aborted before its end")

// ChunkWriter frames a file body on a stream: each Write becomes chunks of a 4-byte
// big-endian length and the bytes; Close writes the empty end chunk. A stream that ends
// without the end chunk is an aborted upload.
type ChunkWriter struct{ W io.Writer }

func (c ChunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), MaxChunk)
		var hdr [4]byte
		binary.BigEndian.PutUint32(hdr[:], uint32(k))
		if _, err := c.W.Write(hdr[:]); err != nil {
			return n, err
		}
		if _, err := c.W.Write(p[:k]); err != nil {
			return n, err
		}
		n += k
		p = p[k:]
	}
	return n, nil
}

// Close writes the end chunk.
func (c ChunkWriter) Close() error {
	_, err := c.W.Write([]byte{0, 0, 0, 0})
	return err
}

// ChunkReader reads what a ChunkWriter wrote; it returns io.EOF after the end chunk and
// ErrAborted if the stream ends before it.
type ChunkReader struct {
	R    io.Reader
	left uint32
	end  bool
}

func (c *ChunkReader) Read(p []byte) (int, error) {
	for c.left == 0 {
		if c.end {
			return 0, io.EOF
		}
		var hdr [4]byte
		if _, err := io.ReadFull(c.R, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return 0, ErrAborted
			}
			return 0, err
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n > MaxChunk {
			return 0, fmt.Errorf("upload chunk of %d bytes is over the %d cap", n, MaxChunk)
		}
		if n == 0 {
			c.end = true
			continue
		}
		c.left = n
	}
	if uint32(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.R.Read(p)
	c.left -= uint32(n)
	if errors.Is(err, io.EOF) {
		if c.left > 0 || n == 0 {
			return n, ErrAborted
		}
		err = nil
	}
	return n, err
}
