package testhost

import (
	"net/netip"
	"testing"

	"golang.org/x/net/dns/dnsmessage"
)

func query(t testing.TB, name string, typ dnsmessage.Type) []byte {
	t.Helper()
	b, err := (&dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 7, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: typ, Class: dnsmessage.ClassINET}},
	}).Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDNSAnswer(t *testing.T) {
	d := newDNS()
	a4, a6 := netip.MustParseAddr("203.0.113.2"), netip.MustParseAddr("2001:db8:cb::2")
	d.Set("Api.Example.COM", a4, a6)
	d.Set("empty.example.")
	many := make([]netip.Addr, 40)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{203, 0, 113, byte(i)})
	}
	d.Set("many.example", many...)
	tests := []struct {
		name    string
		typ     dnsmessage.Type
		max     int
		rcode   dnsmessage.RCode
		answers []netip.Addr
		trunc   bool
	}{
		{"api.example.com.", dnsmessage.TypeA, 512, dnsmessage.RCodeSuccess, []netip.Addr{a4}, false},
		{"API.example.com.", dnsmessage.TypeAAAA, 512, dnsmessage.RCodeSuccess, []netip.Addr{a6}, false},
		{"api.example.com.", dnsmessage.TypeMX, 512, dnsmessage.RCodeSuccess, nil, false},
		{"empty.example.", dnsmessage.TypeA, 512, dnsmessage.RCodeSuccess, nil, false},
		{"unknown.example.", dnsmessage.TypeA, 512, dnsmessage.RCodeNameError, nil, false},
		{"many.example.", dnsmessage.TypeA, 512, dnsmessage.RCodeSuccess, nil, true},
		{"many.example.", dnsmessage.TypeA, 65535, dnsmessage.RCodeSuccess, many, false},
	}
	for _, tt := range tests {
		t.Run(tt.name+" "+tt.typ.String(), func(t *testing.T) {
			var m dnsmessage.Message
			if err := m.Unpack(d.answer(query(t, tt.name, tt.typ), tt.max)); err != nil {
				t.Fatal(err)
			}
			var got []netip.Addr
			for _, r := range m.Answers {
				switch b := r.Body.(type) {
				case *dnsmessage.AResource:
					got = append(got, netip.AddrFrom4(b.A))
				case *dnsmessage.AAAAResource:
					got = append(got, netip.AddrFrom16(b.AAAA))
				}
			}
			if m.ID != 7 || !m.Response || m.RCode != tt.rcode || m.Truncated != tt.trunc || len(got) != len(tt.answers) ||
				len(m.Questions) != 1 || m.Questions[0].Name.String() != tt.name {
				t.Fatalf("got %+v", m)
			}
			for i := range got {
				if got[i] != tt.answers[i] {
					t.Errorf("answer %d: %v, want %v", i, got[i], tt.answers[i])
				}
			}
		})
	}
}

// FuzzDNSAnswer: whatever arrives, the server neither panics nor answers with what does not
// parse.
func FuzzDNSAnswer(f *testing.F) {
	f.Add(query(f, "api.example.com.", dnsmessage.TypeA))
	f.Add(query(f, "x.", dnsmessage.TypeALL))
	f.Add([]byte{0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{})
	d := newDNS()
	d.Set("api.example.com", netip.MustParseAddr("203.0.113.2"), netip.MustParseAddr("2001:db8::1"))
	f.Fuzz(func(t *testing.T, req []byte) {
		out := d.answer(req, 512)
		if out == nil {
			return
		}
		if len(out) > 512 {
			t.Fatalf("%d bytes over UDP", len(out))
		}
		var m dnsmessage.Message
		if err := m.Unpack(out); err != nil {
			t.Fatalf("the answer does not parse: %v", err)
		}
	})
}
