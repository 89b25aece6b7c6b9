package jupyter

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// protocolV1 is the websocket subprotocol that frames each message as binary parts after
// a table of offsets (jupyter_server's "v1.kernel.websocket.jupyter.org"); without it, the
// older framing: one JSON object per text message, the channel a field of it.
const protocolV1 = "v1.kernel.websocket.jupyter.org"

// protocolVersion is the version of Jupyter's messaging protocol spoken here.
const protocolVersion = "5.3"

// header is a message's header. Only what is read here is typed; a request's header goes
// back as its reply's parent_header as it came (raw).
type header struct {
	MsgID    string `json:"msg_id"`
	MsgType  string `json:"msg_type"`
	Session  string `json:"session"`
	Username string `json:"username"`
	Date     string `json:"date"`
	Version  string `json:"version"`
}

// message is one message of the kernel protocol as it crosses the websocket.
type message struct {
	Channel      string
	Header       header
	RawHeader    json.RawMessage // as received: the parent_header of what answers it
	ParentHeader json.RawMessage
	Metadata     json.RawMessage
	Content      json.RawMessage
}

// jsonMessage is the older framing's message (and the parts of a v1 message).
type jsonMessage struct {
	Header       json.RawMessage `json:"header"`
	ParentHeader json.RawMessage `json:"parent_header"`
	Metadata     json.RawMessage `json:"metadata"`
	Content      json.RawMessage `json:"content"`
	Buffers      []any           `json:"buffers"`
	Channel      string          `json:"channel,omitempty"`
	// The header's msg_id and msg_type again, as jupyter_server's messages carry them
	// (jupyter_client's Session.msg): its gateway kernel client reads them there.
	MsgID   string `json:"msg_id,omitempty"`
	MsgType string `json:"msg_type,omitempty"`
}

// jsonIn is what decode reads of the older framing's message: no buffers (they are not
// used, and a generic decoding of them turned a client's bytes into many times as many).
type jsonIn struct {
	Header       json.RawMessage `json:"header"`
	ParentHeader json.RawMessage `json:"parent_header"`
	Metadata     json.RawMessage `json:"metadata"`
	Content      json.RawMessage `json:"content"`
	Channel      string          `json:"channel"`
}

// maxHeaderBytes caps a client's header: it goes back as the parent_header of every
// message that answers the request (each output, to each websocket of the kernel), so a
// large one would be copied many times over. Jupyter's headers are a few hundred bytes.
const maxHeaderBytes = 8 << 10

// lenient is a header field read leniently: a string, or "" for anything else (clients
// write the date as a string or, jupyter_server's gateway client, as seconds).
type lenient string

func (l *lenient) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		*l = lenient(s)
	}
	return nil
}

var errFraming = errors.New("not a kernel message")

// decode reads one websocket message in the connection's framing: v1 (binary only) or the
// older one (a JSON text message, or a binary one whose first part is that JSON). Untrusted
// input: every offset is checked, and what is not a message is an error.
func decode(v1, binaryFrame bool, b []byte) (*message, error) {
	var jm jsonIn
	switch {
	case v1:
		if !binaryFrame {
			return nil, fmt.Errorf("%w: the v1 protocol sends binary messages", errFraming)
		}
		channel, parts, err := splitV1(b)
		if err != nil {
			return nil, err
		}
		if len(parts) < 4 {
			return nil, fmt.Errorf("%w: %d parts, want header, parent header, metadata and content", errFraming, len(parts))
		}
		jm = jsonIn{Header: parts[0], ParentHeader: parts[1], Metadata: parts[2], Content: parts[3], Channel: channel}
	case binaryFrame:
		first, err := firstLegacyPart(b)
		if err != nil {
			return nil, err
		}
		if err := json.Unmarshal(first, &jm); err != nil {
			return nil, fmt.Errorf("%w: %v", errFraming, err)
		}
	default:
		if err := json.Unmarshal(b, &jm); err != nil {
			return nil, fmt.Errorf("%w: %v", errFraming, err)
		}
	}
	if len(jm.Header) > maxHeaderBytes {
		return nil, fmt.Errorf("%w: its header is %d bytes, more than %d", errFraming, len(jm.Header), maxHeaderBytes)
	}
	m := &message{Channel: jm.Channel, RawHeader: jm.Header, ParentHeader: jm.ParentHeader, Metadata: jm.Metadata, Content: jm.Content}
	// Only the strings below are read, leniently (lenient); the rest of the header goes
	// back as it came.
	var hdr struct {
		MsgID    lenient `json:"msg_id"`
		MsgType  lenient `json:"msg_type"`
		Session  lenient `json:"session"`
		Username lenient `json:"username"`
	}
	if err := json.Unmarshal(jm.Header, &hdr); err != nil {
		return nil, fmt.Errorf("%w: its header is not an object", errFraming)
	}
	m.Header = header{MsgID: string(hdr.MsgID), MsgType: string(hdr.MsgType), Session: string(hdr.Session), Username: string(hdr.Username)}
	if m.Header.MsgType == "" {
		return nil, fmt.Errorf("%w: its header has no msg_type", errFraming)
	}
	if m.Channel == "" {
		m.Channel = "shell" // as jupyter_server assumes
	}
	if len(m.Content) == 0 || string(m.Content) == "null" {
		m.Content = json.RawMessage("{}")
	}
	return m, nil
}

// splitV1 splits a v1 message: a little-endian uint64 count n, n uint64 offsets, then the
// channel's name and the parts, each from its offset to the next (the last offset is the
// end).
func splitV1(b []byte) (string, [][]byte, error) {
	if len(b) < 8 {
		return "", nil, fmt.Errorf("%w: too short", errFraming)
	}
	n := binary.LittleEndian.Uint64(b)
	if n < 2 || n > 64 || uint64(len(b)) < 8*(n+1) {
		return "", nil, fmt.Errorf("%w: %d offsets", errFraming, n)
	}
	offs := make([]uint64, n)
	for i := range offs {
		offs[i] = binary.LittleEndian.Uint64(b[8*(i+1):])
		if offs[i] > uint64(len(b)) || (i > 0 && offs[i] < offs[i-1]) || (i == 0 && offs[0] < 8*(n+1)) {
			return "", nil, fmt.Errorf("%w: offset %d out of order", errFraming, i)
		}
	}
	var parts [][]byte
	for i := 1; i+1 < len(offs); i++ {
		parts = append(parts, b[offs[i]:offs[i+1]])
	}
	return string(b[offs[0]:offs[1]]), parts, nil
}

// firstLegacyPart is the JSON part of an older-framing binary message: a big-endian uint32
// count, that many uint32 offsets, the JSON from the first offset to the second, buffers
// after it (not used here).
func firstLegacyPart(b []byte) ([]byte, error) {
	if len(b) < 8 {
		return nil, fmt.Errorf("%w: too short", errFraming)
	}
	n := binary.BigEndian.Uint32(b)
	if n < 1 || n > 64 || uint64(len(b)) < 4*(uint64(n)+1) {
		return nil, fmt.Errorf("%w: %d buffers", errFraming, n)
	}
	start := uint64(binary.BigEndian.Uint32(b[4:]))
	end := uint64(len(b))
	if n > 1 {
		end = uint64(binary.BigEndian.Uint32(b[8:]))
	}
	if start < 4*(uint64(n)+1) || start > end || end > uint64(len(b)) {
		return nil, fmt.Errorf("%w: offsets out of order", errFraming)
	}
	return b[start:end], nil
}

// encode frames m for a connection: v1 binary, or the older JSON text.
func encode(v1 bool, m *message) ([]byte, error) {
	hdr, err := json.Marshal(m.Header)
	if err != nil {
		return nil, err
	}
	parent, md, content := orEmpty(m.ParentHeader), orEmpty(m.Metadata), orEmpty(m.Content)
	if !v1 {
		return json.Marshal(jsonMessage{Header: hdr, ParentHeader: parent, Metadata: md, Content: content, Buffers: []any{}, Channel: m.Channel,
			MsgID: m.Header.MsgID, MsgType: m.Header.MsgType})
	}
	parts := [][]byte{[]byte(m.Channel), hdr, parent, md, content}
	n := uint64(len(parts) + 1)
	b := binary.LittleEndian.AppendUint64(nil, n)
	off := 8 * (n + 1)
	b = binary.LittleEndian.AppendUint64(b, off)
	for _, p := range parts {
		off += uint64(len(p))
		b = binary.LittleEndian.AppendUint64(b, off)
	}
	for _, p := range parts {
		b = append(b, p...)
	}
	return b, nil
}

func orEmpty(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return json.RawMessage("{}")
	}
	return r
}

// newMsgID is a message id: a random UUID (version 4).
func newMsgID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

func formatUUID(b [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// timestamp is a time as Jupyter writes it: UTC, microseconds (jupyter_server 1.x parses
// at most six fractional digits), Z.
func timestamp(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000Z")
}
