package httpapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cellbox/cellbox/api"
)

// TestLinks: signed URLs to a session's files work without an API key for the file and
// method they were made for, until they expire; anything else is refused with a status a
// client can act on: another method, path, session or expiry, a changed signature, an
// ended session, a rotated key.
func TestLinks(t *testing.T) {
	k := startKeyed(t, nil)
	alice, bob := "Authorization: Bearer "+aliceKey, "X-API-Key: "+bobKey
	newSession := func() string {
		a := k.do(t, "POST", "/v1/sessions", "{}", alice)
		var s api.Session
		json.Unmarshal(a.body, &s)
		return s.ID
	}
	id, other := newSession(), newSession()
	// raw sends a request to a URL as given (no key), its path unchanged.
	raw := func(method, u, body string) answer {
		t.Helper()
		req, err := http.NewRequest(method, u, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return answer{res.StatusCode, res.Header, b}
	}
	link := func(sid, body string) api.Link {
		t.Helper()
		a := k.do(t, "POST", "/v1/sessions/"+sid+"/links", body, alice)
		var l api.Link
		if a.status != 200 || json.Unmarshal(a.body, &l) != nil || l.URL == "" {
			t.Fatalf("link %s: %d %s", body, a.status, a.body)
		}
		return l
	}

	// A cell that writes files, asking for links: each changed file has one that works.
	body, _ := json.Marshal(api.ExecuteRequest{Code: "import os\nos.makedirs('d', exist_ok=True)\nopen('d/a b.html', 'w').write('<script>alert(1)</script>')\nopen('plot.txt', 'w').write('hi')", Links: true})
	a := k.do(t, "POST", "/v1/sessions/"+id+"/execute", string(body), alice)
	var res api.ExecuteResult
	if json.Unmarshal(a.body, &res) != nil || len(res.Files) != 2 {
		t.Fatalf("execute: %d %s", a.status, a.body)
	}
	for _, f := range res.Files {
		if !strings.HasPrefix(f.URL, k.url+"/v1/sessions/"+id+"/files/") {
			t.Fatalf("file %+v: no link to this server", f)
		}
		got := raw("GET", f.URL, "")
		want := map[string]string{"/mnt/data/plot.txt": "hi", "/mnt/data/d/a b.html": "<script>alert(1)</script>"}[f.Path]
		if got.status != 200 || string(got.body) != want {
			t.Errorf("GET %s: %d %q", f.URL, got.status, got.body)
		}
		// What the code wrote never runs as a page of this server's origin.
		if got.header.Get("Content-Security-Policy") != "sandbox" || got.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: headers %v", f.URL, got.header)
		}
	}
	if got := raw("HEAD", res.Files[0].URL, ""); got.status != 200 {
		t.Errorf("HEAD on a GET link: %d", got.status)
	}
	// A command and a tool call ask for links the same way.
	if a := k.do(t, "POST", "/v1/sessions/"+id+"/commands", `{"cmd": ["sh", "-c", "echo cmd > by-command.txt"], "links": true}`, alice); !strings.Contains(string(a.body), `"url":"`+k.url) {
		t.Errorf("a command with links: %d %s", a.status, a.body)
	}
	body, _ = json.Marshal(api.ExecuteRequest{Code: "from cellbox import tool\n@tool\ndef note(text: str) -> int:\n    return open('note.txt', 'w').write(text)\n"})
	k.do(t, "POST", "/v1/sessions/"+id+"/execute", string(body), alice)
	if a := k.do(t, "POST", "/v1/sessions/"+id+"/tools/note/call", `{"arguments": {"text": "hi"}, "links": true}`, alice); !strings.Contains(string(a.body), `"url":"`+k.url) {
		t.Errorf("a tool call with links: %d %s", a.status, a.body)
	}
	// Without links asked, none.
	body, _ = json.Marshal(api.ExecuteRequest{Code: "open('plain.txt', 'w').write('x')"})
	if a := k.do(t, "POST", "/v1/sessions/"+id+"/execute", string(body), alice); strings.Contains(string(a.body), `"url"`) {
		t.Errorf("links nobody asked for: %s", a.body)
	}

	// An upload link.
	up := link(id, `{"path": "/mnt/data/in/up.bin", "method": "put", "expires_in_s": 600}`)
	if up.Method != "PUT" || up.Path != "/mnt/data/in/up.bin" || time.Until(up.ExpiresAt) > 601*time.Second || time.Until(up.ExpiresAt) < 590*time.Second {
		t.Errorf("upload link %+v", up)
	}
	if got := raw("PUT", up.URL, "uploaded"); got.status != 201 {
		t.Fatalf("PUT on an upload link: %d %s", got.status, got.body)
	}
	if got := k.do(t, "GET", "/v1/sessions/"+id+"/files/in/up.bin", "", alice); string(got.body) != "uploaded" {
		t.Errorf("the uploaded file: %d %q", got.status, got.body)
	}

	get := link(id, `{"path": "plot.txt"}`)
	u, _ := url.Parse(get.URL)
	q := u.Query()
	with := func(change func(u *url.URL, q url.Values)) string {
		c := *u
		cq := url.Values{}
		for k, v := range q {
			cq[k] = v
		}
		change(&c, cq)
		c.RawQuery = cq.Encode()
		return c.String()
	}
	sig := q.Get("signature")
	flipped := sig[:5] + string(rune('A'+(sig[5]-'A'+1)%26)) + sig[6:]
	refusals := []struct {
		name, method, url string
		status            int
		say               string
	}{
		{"a download link used to upload", "PUT", get.URL, 403, "does not match"},
		{"an upload link used to download", "GET", up.URL, 403, "does not match"},
		{"a changed signature", "GET", with(func(_ *url.URL, q url.Values) { q.Set("signature", flipped) }), 403, "does not match"},
		{"no signature", "GET", with(func(_ *url.URL, q url.Values) { q.Set("signature", "") }), 403, "does not match"},
		{"a later expiry", "GET", with(func(_ *url.URL, q url.Values) { q.Set("expires", "9999999999") }), 403, "does not match"},
		{"no expiry", "GET", with(func(_ *url.URL, q url.Values) { q.Del("expires") }), 403, "no expiry"},
		{"another file", "GET", with(func(u *url.URL, _ url.Values) { u.Path = strings.Replace(u.Path, "plot.txt", "plain.txt", 1) }), 403, "does not match"},
		{"another session", "GET", with(func(u *url.URL, _ url.Values) { u.Path = strings.Replace(u.Path, id, other, 1) }), 403, "does not match"},
		// The split of id and file is the router's: a %2F cannot make the check see
		// another session and file than the one served.
		{"a %2F in the id", "GET", with(func(u *url.URL, _ url.Values) {
			u.Path = strings.Replace(u.Path, id+"/files/plot.txt", id+"/files/x/files/plot.txt", 1)
			u.RawPath = strings.Replace(u.Path, id+"/files/x/files/", id+"%2Ffiles%2Fx/files/", 1)
		}), 404, "not a link"},
	}
	// Out of the workspace, however the path is written: the router cleans a path of dot
	// segments before anything (a key is then wanted); what reaches the link check is
	// refused there.
	for _, p := range []string{"../../../etc/passwd", "%2e%2e/%2e%2e/%2e%2e/etc/passwd", "..%2F..%2F..%2Fetc%2Fpasswd", "%2Fetc%2Fpasswd"} {
		refusals = append(refusals, struct {
			name, method, url string
			status            int
			say               string
		}{"out of the workspace: " + p, "GET", strings.Replace(get.URL, "plot.txt", p, 1), 0, ""})
	}
	for _, r := range refusals {
		t.Run(r.name, func(t *testing.T) {
			got := raw(r.method, r.url, "x")
			var e api.ErrorBody
			json.Unmarshal(got.body, &e)
			if r.status == 0 {
				if got.status < 400 || got.status >= 500 || strings.Contains(string(got.body), "root:") {
					t.Errorf("%s %s: %d %s; want a refusal", r.method, r.url, got.status, got.body)
				}
				return
			}
			if got.status != r.status || !strings.Contains(e.Error.Message, r.say) {
				t.Errorf("%s %s: %d %s; want %d saying %q", r.method, r.url, got.status, got.body, r.status, r.say)
			}
		})
	}
	// An API key wins over a signature: bob's key does not reach alice's file.
	if got := raw("GET", get.URL, ""); got.status != 200 {
		t.Errorf("the link itself: %d", got.status)
	}
	req, _ := http.NewRequest("GET", get.URL, nil)
	req.Header.Set("X-API-Key", bobKey)
	if res, err := http.DefaultClient.Do(req); err != nil || res.StatusCode != 404 {
		t.Errorf("the link with bob's key: %v %v", res.StatusCode, err)
	}

	t.Run("expired", func(t *testing.T) {
		short := link(id, `{"path": "plot.txt", "expires_in_s": 1}`)
		time.Sleep(time.Until(short.ExpiresAt) + 100*time.Millisecond)
		if got := raw("GET", short.URL, ""); got.status != 403 || !strings.Contains(string(got.body), "expired") {
			t.Errorf("an expired link: %d %s", got.status, got.body)
		}
	})
	t.Run("bad requests", func(t *testing.T) {
		for body, say := range map[string]string{
			`{"path": "plot.txt", "method": "DELETE"}`:       "GET (to download) or PUT",
			`{"path": "plot.txt", "expires_in_s": 99999999}`: "1 to 604800 seconds",
			`{"path": "plot.txt", "expires_in_s": -5}`:       "1 to 604800 seconds",
			`{"path": "plot.txt", "expires_in_s": 1e10}`:     "1 to 604800 seconds",
			`{"path": "/etc/passwd"}`:                        "give a file of the workspace",
			`{"path": "/mnt/data"}`:                          "give a file of the workspace",
			`{}`:                                             "give a file of the workspace",
		} {
			if a := k.do(t, "POST", "/v1/sessions/"+id+"/links", body, alice); a.status != 400 || !strings.Contains(string(a.body), say) {
				t.Errorf("%s: %d %s", body, a.status, a.body)
			}
		}
		if a := k.do(t, "POST", "/v1/sessions/"+id+"/links", `{"path": "plot.txt"}`, bob); a.status != 404 {
			t.Errorf("bob signs a link to alice's session: %d %s", a.status, a.body)
		}
		if a := k.do(t, "POST", "/v1/sessions/"+id+"/links", `{"path": "plot.txt"}`); a.status != 401 {
			t.Errorf("a link without a key: %d %s", a.status, a.body)
		}
		// Without an artifacts store, patterns of files to keep there are refused.
		if a := k.do(t, "POST", "/v1/sessions", `{"artifacts": ["*.png"]}`, alice); a.status != 409 || !strings.Contains(string(a.body), "keeps no artifacts store") {
			t.Errorf("artifacts patterns without a store: %d %s", a.status, a.body)
		}
		// A one-shot's files go with its sandbox: no link can outlive them here.
		if a := k.do(t, "POST", "/v1/execute", `{"code": "open('a.txt', 'w').write('x')", "links": true}`, alice); a.status != 409 || !strings.Contains(string(a.body), "run the code in a session") {
			t.Errorf("a one-shot with links: %d %s", a.status, a.body)
		}
	})

	// A rotation ends alice's links, not bob's; a new one works.
	bobs := func() string {
		a := k.do(t, "POST", "/v1/sessions", "{}", bob)
		var s api.Session
		json.Unmarshal(a.body, &s)
		k.do(t, "PUT", "/v1/sessions/"+s.ID+"/files/b.txt", "bob's", bob)
		a = k.do(t, "POST", "/v1/sessions/"+s.ID+"/links", `{"path": "b.txt"}`, bob)
		var l api.Link
		json.Unmarshal(a.body, &l)
		return l.URL
	}()
	if a := k.do(t, "POST", "/v1/links/rotate", "", alice); a.status != 204 {
		t.Fatalf("rotate: %d %s", a.status, a.body)
	}
	if got := raw("GET", get.URL, ""); got.status != 403 {
		t.Errorf("alice's link after her rotation: %d %s", got.status, got.body)
	}
	if got := raw("GET", bobs, ""); got.status != 200 || string(got.body) != "bob's" {
		t.Errorf("bob's link after alice's rotation: %d %s", got.status, got.body)
	}
	fresh := link(id, `{"path": "plot.txt"}`)
	if got := raw("GET", fresh.URL, ""); got.status != 200 {
		t.Errorf("a link made after the rotation: %d %s", got.status, got.body)
	}
	// The session ends: its links with it.
	k.do(t, "DELETE", "/v1/sessions/"+id, "", alice)
	if got := raw("GET", fresh.URL, ""); got.status != 404 || !strings.Contains(string(got.body), "has ended") {
		t.Errorf("a link to an ended session: %d %s", got.status, got.body)
	}
}
