package jupyter

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// v1Frame frames parts as jupyter_server's serialize_msg_to_ws_v1 does, written here from
// its description rather than from encode: a little-endian count of offsets, the offsets,
// the channel, the parts.
func v1Frame(channel string, parts ...string) []byte {
	all := append([]string{channel}, parts...)
	offs := []uint64{8 * uint64(1+len(all)+1)}
	for _, p := range all {
		offs = append(offs, offs[len(offs)-1]+uint64(len(p)))
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(offs)))
	for _, o := range offs {
		b = binary.LittleEndian.AppendUint64(b, o)
	}
	for _, p := range all {
		b = append(b, p...)
	}
	return b
}

func TestDecode(t *testing.T) {
	hdr := `{"msg_id":"m1","msg_type":"execute_request","session":"s","username":"u","date":1764251234.5,"version":"5.3"}`
	legacy := `{"header":` + hdr + `,"parent_header":{},"metadata":{},"content":{"code":"1"},"channel":"shell","buffers":[]}`
	// The older framing's binary form: a big-endian count, offsets, the JSON, a buffer.
	bin := binary.BigEndian.AppendUint32(nil, 2)
	bin = binary.BigEndian.AppendUint32(bin, 12)
	bin = binary.BigEndian.AppendUint32(bin, uint32(12+len(legacy)))
	bin = append(append(bin, legacy...), "BUF"...)
	// A header whose padding makes it larger than maxHeaderBytes: it would go back as the
	// parent_header of every answer.
	bigHdr := `{"msg_id":"m1","msg_type":"execute_request","pad":"` + strings.Repeat("p", maxHeaderBytes) + `"}`
	cases := []struct {
		name      string
		v1, bin   bool
		b         []byte
		channel   string
		wantError bool
	}{
		{"json", false, false, []byte(legacy), "shell", false},
		{"json without a channel is shell", false, false, []byte(strings.Replace(legacy, `,"channel":"shell"`, "", 1)), "shell", false},
		{"legacy binary", false, true, bin, "shell", false},
		{"v1", true, true, v1Frame("control", hdr, "{}", "{}", `{"code":"1"}`), "control", false},
		{"v1 with buffers", true, true, v1Frame("shell", hdr, "{}", "{}", "{}", "buf1", "buf2"), "shell", false},
		{"v1 sent as text", true, false, v1Frame("shell", hdr, "{}", "{}", "{}"), "", true},
		{"v1 with three parts", true, true, v1Frame("shell", hdr, "{}", "{}"), "", true},
		{"v1 too short", true, true, []byte{1, 2, 3}, "", true},
		{"v1 count too large", true, true, binary.LittleEndian.AppendUint64(nil, 1<<40), "", true},
		{"not json", false, false, []byte("{nope"), "", true},
		{"no msg_type", false, false, []byte(`{"header":{"msg_id":"x"},"content":{}}`), "", true},
		{"header not an object", false, false, []byte(`{"header":"x"}`), "", true},
		{"header an array", true, true, v1Frame("shell", "[]", "{}", "{}", "{}"), "", true},
		{"json header over the cap", false, false, []byte(`{"header":` + bigHdr + `,"content":{}}`), "", true},
		{"v1 header over the cap", true, true, v1Frame("shell", bigHdr, "{}", "{}", "{}"), "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := decode(c.v1, c.bin, c.b)
			if c.wantError {
				if err == nil {
					t.Fatalf("decoded: channel %q, msg_type %q", m.Channel, m.Header.MsgType)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.Channel != c.channel || m.Header.MsgType != "execute_request" || m.Header.MsgID != "m1" {
				t.Errorf("got %+v", m)
			}
		})
	}
	// Offsets out of order, or past the end, in either framing.
	bad := v1Frame("shell", hdr, "{}", "{}", "{}")
	binary.LittleEndian.PutUint64(bad[16:], 1<<30)
	if _, err := decode(true, true, bad); err == nil {
		t.Error("an offset past the end was decoded")
	}
	badLegacy := bytes.Clone(bin)
	binary.BigEndian.PutUint32(badLegacy[4:], 1<<30)
	if _, err := decode(false, true, badLegacy); err == nil {
		t.Error("a legacy offset past the end was decoded")
	}
}

// TestDecodeHolds: what decode makes of a message is about as large as the message: the
// older framing's buffers (not used) and a header's fields that are not read are skipped,
// not built into values many times their size.
func TestDecodeHolds(t *testing.T) {
	ones := strings.TrimSuffix(strings.Repeat("1,", 100_000), ",")
	for name, b := range map[string]string{
		"buffers":      `{"header":{"msg_id":"m","msg_type":"execute_request"},"content":{},"buffers":[` + ones + `]}`,
		"header field": `{"header":{"msg_id":"m","msg_type":"execute_request","date":[` + strings.Repeat("1,", 2000) + `1]},"content":{}}`,
	} {
		allocs := testing.AllocsPerRun(5, func() {
			if _, err := decode(false, false, []byte(b)); err != nil {
				t.Fatal(err)
			}
		})
		if allocs > 100 {
			t.Errorf("%s: %.0f allocations to decode one message", name, allocs)
		}
	}
}

// TestEncode: what is sent decodes as jupyter_server decodes it, in both framings.
func TestEncode(t *testing.T) {
	m := &message{Channel: "iopub", Header: header{MsgID: "id", MsgType: "stream", Session: "k", Username: "u", Date: timestamp(fixed), Version: protocolVersion},
		ParentHeader: json.RawMessage(`{"msg_id":"p"}`), Content: json.RawMessage(`{"name":"stdout","text":"hi"}`)}
	b, err := encode(false, m)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	json.Unmarshal(b, &got)
	if got["channel"] != "iopub" || got["msg_type"] != "stream" || got["msg_id"] != "id" || got["header"].(map[string]any)["date"] != "2026-11-27T10:00:00.123456Z" ||
		got["parent_header"].(map[string]any)["msg_id"] != "p" || got["metadata"] == nil {
		t.Errorf("json: %s", b)
	}
	b, err = encode(true, m)
	if err != nil {
		t.Fatal(err)
	}
	// As deserialize_msg_from_ws_v1 reads it.
	n := binary.LittleEndian.Uint64(b)
	offs := make([]uint64, n)
	for i := range offs {
		offs[i] = binary.LittleEndian.Uint64(b[8*(i+1):])
	}
	if n != 6 || string(b[offs[0]:offs[1]]) != "iopub" || string(b[offs[4]:offs[5]]) != `{"name":"stdout","text":"hi"}` || offs[5] != uint64(len(b)) {
		t.Errorf("v1: %d offsets %v, %q", n, offs, b)
	}
	if m2, err := decode(true, true, b); err != nil || m2.Header.MsgType != "stream" || string(m2.ParentHeader) != `{"msg_id":"p"}` {
		t.Errorf("v1 round trip: %+v, %v", m2, err)
	}
}

func FuzzDecode(f *testing.F) {
	hdr := `{"msg_id":"m","msg_type":"execute_request"}`
	f.Add(true, true, v1Frame("shell", hdr, "{}", "{}", "{}"))
	f.Add(false, false, []byte(`{"header":`+hdr+`,"content":{}}`))
	f.Add(false, true, []byte{0, 0, 0, 1, 0, 0, 0, 8, '{', '}'})
	f.Fuzz(func(t *testing.T, v1, bin bool, b []byte) {
		m, err := decode(v1, bin, b)
		if err == nil && (m.Header.MsgType == "" || m.Channel == "" || len(m.Content) == 0) {
			t.Errorf("decoded without what it needs: %+v", m)
		}
	})
}

// TestKernelIDs: a session id and its kernel id map both ways, under one key only; ids of
// another form, and a session id itself, are no kernel ids.
func TestKernelIDs(t *testing.T) {
	c, _ := newIDCodec([]byte("0123456789abcdef"))
	other, _ := newIDCodec([]byte("fedcba9876543210"))
	for _, sid := range []string{"9837de5dc60eee5f1b625950", "a1b2c3d49837de5dc60eee5f1b625950"} {
		kid, ok := c.kernel(sid)
		if !ok || len(kid) != 36 || strings.Count(kid, "-") != 4 {
			t.Fatalf("kernel id of %s: %q", sid, kid)
		}
		if back, ok := c.session(kid); !ok || back != sid {
			t.Errorf("%s -> %s -> %s", sid, kid, back)
		}
		if back, ok := c.session(strings.ToUpper(kid)); !ok || back != sid {
			t.Errorf("upper case %s -> %s", kid, back)
		}
		if back, _ := other.session(kid); back == sid {
			t.Errorf("another key reads %s as %s", kid, sid)
		}
	}
	for _, sid := range []string{"", "xyz", "9837DE5DC60EEE5F1B625950", "00000000" + "9837de5dc60eee5f1b625950", "9837de5dc60eee5f1b6259"} {
		if kid, ok := c.kernel(sid); ok {
			t.Errorf("session id %q made kernel id %s", sid, kid)
		}
	}
	for _, kid := range []string{"", "not-a-uuid", "9837de5d-c60e-ee5f-1b62-5950", "9837de5dc60eee5f1b6259501234567890ab", "zz37de5d-c60e-ee5f-1b62-59501b625950"} {
		if sid, ok := c.session(kid); ok {
			t.Errorf("kernel id %q read as %s", kid, sid)
		}
	}
}

var fixed = time.Date(2026, 11, 27, 10, 0, 0, 123456789, time.UTC)
