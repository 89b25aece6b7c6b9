package image

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/errdefs"
)

func TestDefault(t *testing.T) {
	s := Default()
	for _, want := range []string{"python3", "python3-ipython", "python3-numpy", "python3-pandas", "python3-matplotlib", "python3-scipy",
		"python3-sklearn", "python3-seaborn", "python3-statsmodels", "python3-openpyxl", "python3-pil", "python3-sympy",
		"fonts-dejavu-core", "bash", "coreutils", "git", "curl"} {
		found := false
		for _, p := range s.Debian {
			found = found || p == want
		}
		if !found {
			t.Errorf("the default image lacks %s", want)
		}
	}
	if s.Suite != "bookworm" || s.Name != DefaultName {
		t.Errorf("default: %+v", s)
	}
}

func TestParse(t *testing.T) {
	a, err := Parse("a", strings.NewReader("# mine\ndebian zlib1g python3\ndebian python3   # again\npip requests>=2.31\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(a.Debian, " ") != "python3 python3-pip zlib1g" || a.Pip[0] != "requests>=2.31" || a.Suite != "bookworm" {
		t.Errorf("parsed %+v", a)
	}
	b, _ := Parse("b", strings.NewReader("suite bookworm\npip requests>=2.31\ndebian python3 zlib1g\n"))
	if a.Hash() != b.Hash() {
		t.Error("the same packages in another order hash differently")
	}
	c, _ := Parse("a", strings.NewReader("debian python3 zlib1g\npip requests>=2.31\nsuite trixie\n"))
	if a.Hash() == c.Hash() {
		t.Error("another suite hashes the same")
	}
	df := a.Dockerfile()
	for _, want := range []string{"FROM debian:bookworm-slim", "    python3 \\", "    zlib1g \\", `pip install --no-cache-dir --break-system-packages "requests>=2.31"`,
		`LABEL cellbox.image="a" cellbox.hash="` + a.Hash() + `" cellbox.mpl-cache="false"`} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q:\n%s", want, df)
		}
	}
	if strings.Contains(df, "MPLCONFIGDIR") {
		t.Errorf("a font cache without matplotlib:\n%s", df)
	}
	if df := Default().Dockerfile(); !strings.Contains(df, "MPLCONFIGDIR="+MPLCachePath) || !strings.Contains(df, `cellbox.mpl-cache="true"`) {
		t.Errorf("the default image's Dockerfile builds no font cache:\n%s", df)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, tt := range map[string]struct{ image, list, msg string }{
		"bad name":      {"../x", "debian python3", "image name"},
		"no packages":   {"a", "# nothing\nsuite bookworm\n", "no Debian package"},
		"unknown word":  {"a", "debian python3\nrun rm -rf /\n", `line 2: unknown word "run"`},
		"option as pkg": {"a", "debian --allow-unauthenticated python3", "not a Debian package"},
		"shell in pkg":  {"a", "debian python3;curl", "not a Debian package"},
		"pip option":    {"a", "debian python3\npip --index-url http://evil x", "not a requirement"},
		"pip url":       {"a", "debian python3\npip https://evil/x.whl", "not a requirement"},
		"pip path":      {"a", "debian python3\npip ./x", "not a requirement"},
		"two suites":    {"a", "suite bookworm\nsuite trixie\ndebian python3", "second suite"},
		"bad suite":     {"a", "suite ../../x\ndebian python3", "not a Debian release"},
		"empty debian":  {"a", "debian", "names no package"},
		"too big":       {"a", "debian python3\n#" + strings.Repeat("x", maxListBytes), "larger than"},
		"too many":      {"a", strings.Repeat("debian p"+strings.Repeat("a", 3)+"\n", 1) + manyPackages(maxPackages+1), "more than"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse(tt.image, strings.NewReader(tt.list))
			if err == nil || !strings.Contains(err.Error(), tt.msg) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error %v, want one with %q", err, tt.msg)
			}
		})
	}
}

func manyPackages(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString("debian pkg" + strconv.Itoa(i) + "\n")
	}
	return b.String()
}

// FuzzParse: a list from a user's file never panics, and what parses yields names that
// cannot reach a command line as options or paths.
func FuzzParse(f *testing.F) {
	f.Add(string(defaultList))
	f.Add("suite trixie\ndebian a b c\npip x[y]>=1,<2\n")
	f.Fuzz(func(t *testing.T, list string) {
		s, err := Parse("fuzz", strings.NewReader(list))
		if err != nil {
			return
		}
		for _, p := range append(append([]string{s.Suite}, s.Debian...), s.Pip...) {
			if p == "" || strings.HasPrefix(p, "-") || strings.ContainsAny(p, "/\\;$`'\"\n\x00") {
				t.Errorf("parsed %q", p)
			}
		}
	})
}
