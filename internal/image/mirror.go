package image

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// HostMirror is the Debian archive this machine's apt uses (its sources under root, "/"
// for the machine), so that an image builds from where the machine's own packages come
// from (a local mirror or proxy); DefaultMirror when apt names none.
func HostMirror(root string) string {
	files, _ := filepath.Glob(filepath.Join(root, "etc/apt/sources.list.d/*.sources"))
	for _, f := range files {
		if m := deb822Mirror(f); m != "" {
			return m
		}
	}
	if m := listMirror(filepath.Join(root, "etc/apt/sources.list")); m != "" {
		return m
	}
	return DefaultMirror
}

// release: a suite of the archive itself (bookworm, stable), not of its security or
// updates archives.
func release(suite string) bool { return suite != "" && !strings.Contains(suite, "-") && !strings.Contains(suite, "/") }

// deb822Mirror reads a .sources file: the URI of the first "Types: deb" stanza with a release suite.
func deb822Mirror(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	stanza := map[string]string{}
	pick := func() string {
		if !strings.Contains(stanza["types"], "deb") || stanza["uris"] == "" || strings.EqualFold(stanza["enabled"], "no") {
			return ""
		}
		for _, s := range strings.Fields(stanza["suites"]) {
			if release(s) {
				return strings.Fields(stanza["uris"])[0]
			}
		}
		return ""
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			if m := pick(); m != "" {
				return m
			}
			stanza = map[string]string{}
			continue
		}
		if strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			stanza[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
		}
	}
	return pick()
}

// listMirror reads a sources.list: the URI of the first "deb" line with a release suite.
func listMirror(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || fields[0] != "deb" {
			continue
		}
		fields = fields[1:]
		if strings.HasPrefix(fields[0], "[") { // [signed-by=... arch=...]
			for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
				fields = fields[1:]
			}
			if len(fields) > 0 {
				fields = fields[1:]
			}
		}
		if len(fields) >= 2 && release(fields[1]) {
			return fields[0]
		}
	}
	return ""
}
