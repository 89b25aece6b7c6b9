package e2b

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// A file link a browser sends names its sandbox in its host, when E2B_DOMAIN is set: only
// E2B's "<port>-<id>." for the ports cellbox serves is taken for one.
func TestSandboxOfHost(t *testing.T) {
	for host, want := range map[string]string{
		"49983-b711ab1fdc694132f604ae2f.e2b.test":      "b711ab1fdc694132f604ae2f 49983",
		"49999-b711ab1fdc694132f604ae2f.e2b.test:8443": "b711ab1fdc694132f604ae2f 49999",
		"8080-b711ab1fdc694132f604ae2f.example.com":    "",
		"49983-x.e2b.test":                             "",
		"cellbox.example.com":                          "",
		"127.0.0.1:8080":                               "",
		"49983-b711ab1fdc694132f604ae2f":               "",
	} {
		r := httptest.NewRequest("GET", "/files?path=a", nil)
		r.Host = host
		id, port, ok := sandboxOfHost(r)
		got := ""
		if ok {
			got = id + " " + port
		}
		if got != want {
			t.Errorf("%s: %q, want %q", host, got, want)
		}
	}
}

// The signature is E2B's: the SDK's own for a known token, path, user and expiry.
func TestLinkSignature(t *testing.T) {
	// As Node computes it (the SDK uses WebCrypto): "v1_" + base64(sha256("/home/user/a.txt:read:user:tok:1800000000")), unpadded.
	const want = "v1_Gml9VX4EmH7uKuRohmnsu1MXtbOyYcC+T3qCeV7vKaY"
	r := httptest.NewRequest("GET", "/files?path=%2Fhome%2Fuser%2Fa.txt&username=user&signature_expiration=1800000000&signature="+url.QueryEscape(want), nil)
	l, err := parseFileLink(r)
	if err != nil {
		t.Fatal(err)
	}
	if got := newSigner(l).signature("read", "tok"); got != want {
		t.Errorf("signature %s", got)
	}
	if err := checkFileLink(r, "tok", time.Unix(1_700_000_000, 0)); err != nil {
		t.Errorf("the link: %v", err)
	}
	if err := checkFileLink(r, "tok", time.Unix(1_800_000_000, 0)); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Errorf("the link at its expiry: %v", err)
	}
}

// E2B joins the signed fields with colons: a read link to a file whose name holds
// ":write:..." must not pass as a write link to a file named by its start, with the rest
// moved into the user.
func TestLinkFieldsDoNotShift(t *testing.T) {
	sign := func(path, op, user string) string {
		r := httptest.NewRequest("GET", "/files?"+url.Values{"path": {path}, "username": {user}}.Encode(), nil)
		l, _ := parseFileLink(r)
		return newSigner(l).signature(op, "tok")
	}
	shared := sign("/home/user/app.py:write:x", "read", "user")
	for _, forged := range []struct{ method, path, user string }{
		{"POST", "/home/user/app.py", "x:read:user"},
		{"GET", "/home/user/app.py", "x:read:user"},
	} {
		q := url.Values{"path": {forged.path}, "username": {forged.user}, "signature": {shared}}
		r := httptest.NewRequest(forged.method, "/files?"+q.Encode(), nil)
		if err := checkFileLink(r, "tok", time.Now()); err == nil {
			t.Errorf("%s %s as %q passed with the signature of a read of app.py:write:x", forged.method, forged.path, forged.user)
		}
	}
	// Too long for any link the SDK makes: refused before any hashing.
	r := httptest.NewRequest("GET", "/files?path="+strings.Repeat("a", 1<<16)+"&signature=v1_x", nil)
	if _, err := parseFileLink(r); err == nil {
		t.Error("a 64 KiB path was taken")
	}
}

// A file link that names no sandbox costs a scan of every session's token: with the scans
// and their waiting room full, the next one is refused at once (503), not queued.
func TestLinkScansBounded(t *testing.T) {
	for range cap(scanners) {
		scanners <- struct{}{}
	}
	defer func() {
		for range cap(scanners) {
			<-scanners
		}
	}()
	r := httptest.NewRequest("GET", "/files?path=%2Fhome%2Fuser%2Fa.txt&username=user&signature=v1_"+strings.Repeat("A", 43), nil)
	w := httptest.NewRecorder()
	(&Handler{}).ServeHTTP(w, r)
	if w.Code != 503 || !strings.Contains(w.Body.String(), "retry") {
		t.Errorf("a link past the scans' room: %d %s; want 503, retry", w.Code, w.Body)
	}
}
