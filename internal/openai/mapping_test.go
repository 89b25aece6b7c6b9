package openai

import (
	"errors"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

func TestMemoryLimit(t *testing.T) {
	for _, c := range []struct {
		limit string
		max   int
		mb    int
		bad   bool
	}{
		{"", 8192, 0, false}, // the server's default
		{"1g", 8192, 1024, false},
		{"4g", 8192, 4096, false},
		{"16g", 8192, 0, true}, // beyond the server's max
		{"64g", 0, 65536, false},
		{"2g", 8192, 0, true},
		{"1G", 8192, 0, true},
	} {
		mb, err := memoryMB(c.limit, c.max)
		if mb != c.mb || (err != nil) != c.bad || c.bad && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("memoryMB(%q, %d) = %d, %v; want %d, bad %v", c.limit, c.max, mb, err, c.mb, c.bad)
		}
		if !c.bad && c.limit != "" && memoryLimitOf(mb) != c.limit {
			t.Errorf("memoryLimitOf(%d) = %q; want %q", mb, memoryLimitOf(mb), c.limit)
		}
	}
	if got := memoryLimitOf(2048); got != "" {
		t.Errorf("memoryLimitOf(2048) = %q; want none", got)
	}
}

func TestExpiresAfter(t *testing.T) {
	for _, c := range []struct {
		ea   *expiresAfter
		want int
		bad  bool
	}{
		{nil, 0, false},
		{&expiresAfter{"last_active_at", 20}, 1200, false},
		{&expiresAfter{"last_active_at", 60}, 3600, false},
		{&expiresAfter{"last_active_at", 61}, 0, true}, // beyond the max
		{&expiresAfter{"last_active_at", 0}, 0, true},
		{&expiresAfter{"created_at", 20}, 0, true},
	} {
		got, err := idleTimeoutS(c.ea, time.Hour)
		if got != c.want || (err != nil) != c.bad {
			t.Errorf("idleTimeoutS(%+v) = %d, %v; want %d, bad %v", c.ea, got, err, c.want, c.bad)
		}
	}
	c := containerOf(api.Session{ID: "s1", IdleTimeoutS: 1200, Limits: api.Limits{MemoryMB: 4096},
		Metadata: map[string]string{nameKey: "box"}, Network: api.Network{Egress: "none"}})
	if c.ID != "cntr_s1" || c.ExpiresAfter != (expiresAfter{"last_active_at", 20}) || c.MemoryLimit != "4g" || c.Name != "box" ||
		c.Object != "container" || c.Status != "running" || c.NetworkPolicy.Type != "disabled" {
		t.Errorf("containerOf: %+v", c)
	}
}

func TestNetworkPolicyMapping(t *testing.T) {
	for _, c := range []struct {
		name string
		in   *networkPolicy
		want *api.Network
		bad  bool
	}{
		{"absent: the server's default", nil, nil, false},
		{"disabled", &networkPolicy{Type: "disabled"}, &api.Network{Egress: "none"}, false},
		{"allowlist", &networkPolicy{Type: "allowlist", AllowedDomains: []string{"pypi.org", "*.pythonhosted.org"}},
			&api.Network{Egress: "allowlist", Allow: []string{"pypi.org", "*.pythonhosted.org"}}, false},
		{"secrets: a header each, by domain", &networkPolicy{Type: "allowlist", AllowedDomains: []string{"api.example.com"},
			DomainSecrets: []domainSecret{{"api.example.com", "Authorization", "Bearer x"}, {"api.example.com", "X-Key", "y"}, {"b.example.com", "X-Key", "z"}}},
			&api.Network{Egress: "allowlist", Allow: []string{"api.example.com"}, Secrets: []api.EgressSecret{
				{Domain: "api.example.com", Headers: map[string]string{"Authorization": "Bearer x", "X-Key": "y"}},
				{Domain: "b.example.com", Headers: map[string]string{"X-Key": "z"}}}}, false},
		{"allowlist without domains", &networkPolicy{Type: "allowlist"}, nil, true},
		{"disabled with domains", &networkPolicy{Type: "disabled", AllowedDomains: []string{"a.com"}}, nil, true},
		{"a secret without a name", &networkPolicy{Type: "allowlist", AllowedDomains: []string{"a.com"}, DomainSecrets: []domainSecret{{Domain: "a.com"}}}, nil, true},
		{"unknown type", &networkPolicy{Type: "open"}, nil, true},
	} {
		got, err := networkOf(c.in)
		if !reflect.DeepEqual(got, c.want) || (err != nil) != c.bad {
			t.Errorf("%s: networkOf = %+v, %v; want %+v, bad %v", c.name, got, err, c.want, c.bad)
		}
	}
	if p := networkPolicyOf(api.Network{Egress: "allowlist", Allow: []string{"a.com"}}); p.Type != "allowlist" || !reflect.DeepEqual(p.AllowedDomains, []string{"a.com"}) {
		t.Errorf("networkPolicyOf(allowlist) = %+v", p)
	}
	if p := networkPolicyOf(api.Network{Egress: "public"}); p != nil {
		t.Errorf("networkPolicyOf(public) = %+v; want none (OpenAI's shape has no public)", p)
	}
}

func TestIDs(t *testing.T) {
	for _, rel := range []string{"a.csv", "out/plot.png", "naïve name.txt"} {
		id := cfileID(rel)
		got, err := cfilePath(id)
		if err != nil || got != rel {
			t.Errorf("cfilePath(cfileID(%q)) = %q, %v", rel, got, err)
		}
	}
	for _, id := range []string{"", "cfile_", "cfile_!!", "file-abc", cfilePrefix + "a/b"} {
		if _, err := cfilePath(id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("cfilePath(%q): %v; want not found", id, err)
		}
	}
	for _, id := range []string{"", "cntr", "cntr_", "sess_1"} {
		if _, err := sessionID(id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("sessionID(%q): %v; want not found", id, err)
		}
	}
	if id, err := sessionID("cntr_abc"); id != "abc" || err != nil {
		t.Errorf("sessionID(cntr_abc) = %q, %v", id, err)
	}
	for id, ok := range map[string]bool{"file-0123456789abcdef01234567": true, "file-0123456789abcdef0123456": false,
		"file-../../../etc/passwd0000": false, "file-0123456789ABCDEF01234567": false} {
		if validID(id) != ok {
			t.Errorf("validID(%q) = %v", id, !ok)
		}
	}
}

type it struct {
	c  int64
	id string
}

func (i it) key() (int64, string) { return i.c, i.id }

func TestPagination(t *testing.T) {
	all := func() []it { return []it{{3, "c"}, {1, "a"}, {2, "b"}, {2, "b2"}, {5, "e"}} }
	list := func(q string) (page[it], error) {
		l, err := parseListing(httptest.NewRequest("GET", "/x?"+q, nil), 2, 3)
		if err != nil {
			return page[it]{}, err
		}
		return cut(l, all())
	}
	ids := func(p page[it]) (out []string) {
		for _, x := range p.Data {
			out = append(out, x.id)
		}
		return out
	}
	for _, c := range []struct {
		q       string
		want    []string
		hasMore bool
	}{
		{"", []string{"e", "c"}, true}, // desc by default, limit 2 by default
		{"after=c", []string{"b2", "b"}, true},
		{"after=b", []string{"a"}, false},
		{"order=asc&limit=3", []string{"a", "b", "b2"}, true},
		{"order=asc&limit=3&after=b2", []string{"c", "e"}, false},
		{"order=asc&after=e", nil, false},
	} {
		p, err := list(c.q)
		if err != nil || !reflect.DeepEqual(ids(p), c.want) || p.HasMore != c.hasMore || p.Object != "list" {
			t.Errorf("%q: %v has_more %v, %v; want %v has_more %v", c.q, ids(p), p.HasMore, err, c.want, c.hasMore)
			continue
		}
		if len(c.want) > 0 && (*p.FirstID != c.want[0] || *p.LastID != c.want[len(c.want)-1]) {
			t.Errorf("%q: first_id %s, last_id %s", c.q, *p.FirstID, *p.LastID)
		}
		if len(c.want) == 0 && (p.FirstID != nil || p.Data == nil) {
			t.Errorf("%q: an empty page is data [] with first_id null: %+v", c.q, p)
		}
	}
	for _, q := range []string{"limit=0", "limit=4", "limit=x", "order=up", "after=zz"} {
		if _, err := list(q); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%q: %v; want invalid", q, err)
		}
	}
}

// FuzzNames: an upload's file name becomes one plain name in /mnt/data, and a container
// file id decodes to what encoded it.
func FuzzNames(f *testing.F) {
	for _, s := range []string{"data.csv", "../x", "a/b\\c", "..", "", "/", "C:\\Users\\me\\x.txt"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if name, err := baseName(s); err == nil && (name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00")) {
			t.Errorf("baseName(%q) = %q", s, name)
		}
		if s != "" {
			if got, err := cfilePath(cfileID(s)); err != nil || got != s {
				t.Errorf("cfilePath(cfileID(%q)) = %q, %v", s, got, err)
			}
		}
	})
}
