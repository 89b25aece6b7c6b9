package image

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// HostMirror is the archive this machine's apt uses for suite (its sources under root, "/"
// for the machine), so that an image builds from where the machine's own packages come
// from (a local mirror or proxy); DefaultMirror when apt has no source of that suite (an
// Ubuntu host, another Debian release).
func HostMirror(root, suite string) string {
	files, _ := filepath.Glob(filepath.Join(root, "etc/apt/sources.list.d/*.sources"))
	for _, f := range files {
		if m := deb822Mirror(f, suite); m != "" {
			return m
		}
	}
	if m := listMirror(filepath.Join(root, "etc/apt/sources.list"), suite); m != "" {
		return m
	}
	return DefaultMirror
}

// deb822Mirror reads a .sources file: the URI of the first "Types: deb" stanza of suite.
func deb822Mirror(path, suite string) string {
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
			if s == suite {
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

// listMirror reads a sources.list: the URI of the first "deb" line of suite.
func listMirror(path, suite string) string {
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
		if len(fields) >= 2 && fields[1] == suite {
			return fields[0]
		}
	}
	return ""
}
