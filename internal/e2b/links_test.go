package e2b

import (
	"net/http/httptest"
	"testing"
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
	r := httptest.NewRequest("GET", "/files?path=%2Fhome%2Fuser%2Fa.txt&username=user&signature_expiration=1800000000", nil)
	if got := linkSignature(r, "read", "tok"); got != "v1_Gml9VX4EmH7uKuRohmnsu1MXtbOyYcC+T3qCeV7vKaY" {
		t.Errorf("signature %s", got)
	}
}
