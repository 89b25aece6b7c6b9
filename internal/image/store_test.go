package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/errdefs"
)

func TestDebootstrapStep(t *testing.T) {
	for line, want := range map[string]string{
		"I: Retrieving libc6 2.36-9":                "download libc6",
		"I: Unpacking libpython3.11:amd64...":       "unpack libpython3.11",
		"I: Configuring python3-jedi...":            "configure python3-jedi",
		"I: Retrieving InRelease":                   "",
		"I: Retrieving required packages...":        "",
		"I: Unpacking the base system...":           "",
		"I: Configuring the base system...":         "",
		"W: Failure trying to run: chroot /x mount": "",
	} {
		stage, pkg, ok := debootstrapStep(line)
		got := ""
		if ok {
			got = stage + " " + pkg
		}
		if got != want {
			t.Errorf("%q: %q, want %q", line, got, want)
		}
	}
}

// TestStoreLayout: an image is found by its current build, listed, and removed whole; a
// missing one says how to build it.
func TestStoreLayout(t *testing.T) {
	dir := t.TempDir()
	st := NewStore(dir, "")
	if _, err := st.Get("default"); errdefs.Code(err) != api.CodeNotFound || !strings.Contains(err.Error(), "cellbox image build default") {
		t.Errorf("missing default: %v", err)
	}
	if _, err := st.Get("mine"); err == nil || !strings.Contains(err.Error(), "cellbox image build mine --file mine.list") {
		t.Errorf("missing mine: %v", err)
	}
	if _, err := st.Get("../etc"); errdefs.Code(err) != api.CodeInvalidArgument {
		t.Errorf("a path as a name: %v", err)
	}
	for _, build := range []struct{ name, hash string }{{"mine", "aaaa"}, {"mine", "bbbb"}, {"other", "cccc"}} {
		d := filepath.Join(dir, build.name, build.hash)
		os.MkdirAll(filepath.Join(d, "rootfs"), 0o755)
		os.WriteFile(filepath.Join(d, "image.json"), []byte(`{"name": "`+build.name+`", "hash": "`+build.hash+`", "suite": "bookworm", "packages": 3, "size_bytes": 1000}`), 0o644)
		if err := st.setCurrent(build.name, build.hash); err != nil {
			t.Fatal(err)
		}
	}
	im, err := st.Get("mine")
	if err != nil || im.Hash != "bbbb" || im.Root != filepath.Join(dir, "mine", "bbbb", "rootfs") {
		t.Fatalf("mine: %+v %v", im, err)
	}
	list, err := st.List()
	if err != nil || len(list) != 2 || list[0].Name != "mine" || list[1].Name != "other" {
		t.Errorf("list %+v %v", list, err)
	}
	if err := st.Remove("mine"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "mine")); !os.IsNotExist(err) {
		t.Errorf("mine's builds are left: %v", err)
	}
	if list, _ := st.List(); len(list) != 1 {
		t.Errorf("after rm: %+v", list)
	}
}
