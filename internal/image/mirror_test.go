package image

import (
	"os"
	"path/filepath"
	"testing"
)

func TestHostMirror(t *testing.T) {
	for name, tc := range map[string]struct{ sources, list, want string }{
		"none": {want: DefaultMirror},
		"deb822, security first": {sources: "Types: deb\nURIs: http://sec.example/debian-security\nSuites: bookworm-security\n\n" +
			"# a comment\nTypes: deb deb-src\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n", want: "http://mirror.example/debian"},
		"deb822 disabled": {sources: "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n", want: DefaultMirror},
		"sources.list":    {list: "# deb http://old.example/debian bookworm main\ndeb [signed-by=/k.gpg arch=amd64] http://list.example/debian bookworm main\n", want: "http://list.example/debian"},
		"only deb-src":    {list: "deb-src http://src.example/debian bookworm main\n", want: DefaultMirror},
		"another release": {sources: "Types: deb\nURIs: http://a.example/debian\nSuites: trixie\n", list: "deb http://b.example/debian bookworm main\n", want: "http://b.example/debian"},
		"ubuntu":          {list: "deb http://archive.ubuntu.com/ubuntu jammy main\n", want: DefaultMirror},
		"third party":     {sources: "Types: deb\nURIs: https://pkgs.example/apt\nSuites: stable\n", want: DefaultMirror},
		"updates only":    {list: "deb http://u.example/debian bookworm-updates main\n", want: DefaultMirror},
	} {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			os.MkdirAll(filepath.Join(root, "etc/apt/sources.list.d"), 0o755)
			if tc.sources != "" {
				os.WriteFile(filepath.Join(root, "etc/apt/sources.list.d/debian.sources"), []byte(tc.sources), 0o644)
			}
			if tc.list != "" {
				os.WriteFile(filepath.Join(root, "etc/apt/sources.list"), []byte(tc.list), 0o644)
			}
			if got := HostMirror(root, "bookworm"); got != tc.want {
				t.Errorf("HostMirror = %q, want %q", got, tc.want)
			}
		})
	}
}
