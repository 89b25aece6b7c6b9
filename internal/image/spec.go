// Package image defines sandbox images by package lists and builds their root filesystems:
// one short, readable list per image (Debian packages, and Python packages for machines
// that reach an index) is the single source of the runc `image` root filesystem, the
// Docker image and the Dockerfile.
//
// Not for: running sandboxes (package sandbox and its backends) or choosing which image a
// session gets (package session).
package image

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"io"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/cellbox/cellbox/internal/errdefs"
)

// DefaultName is the image sessions get when they name none.
const DefaultName = "default"

//go:embed default.list
var defaultList []byte

// Spec is an image's package list.
type Spec struct {
	Name   string
	Suite  string   // the Debian release
	Debian []string // Debian packages, sorted, without duplicates
	Pip    []string // Python requirements, in the list's order
}

// Bounds of a list: it is read from users' files.
const (
	maxListBytes = 64 << 10
	maxPackages  = 2000
)

// The patterns are compiled at their first use: the guest, the same binary, has no use for
// them, and every sandbox's guest would hold them (~80 KB).
var (
	namePattern  = lazyRegexp(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	debPattern   = lazyRegexp(`^[a-z0-9][a-z0-9+.-]+$`)                   // Debian policy 5.6.1
	suitePattern = lazyRegexp(`^[a-z][a-z0-9-]{1,30}$`)                   // bookworm, trixie, ...
	pipPattern   = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9._\-\[\],<>=!~ ]*$`) // name[extras] and version specifiers; no URLs, options or paths
)

func lazyRegexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

// CheckName says why name cannot name an image, or nil.
func CheckName(name string) error {
	if !namePattern().MatchString(name) {
		return fmt.Errorf("image name %q: use 1 to 63 of a-z 0-9 . _ -, starting with a letter or digit: %w", name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Default is the default image's list, the one built into cellbox.
func Default() *Spec {
	s, err := Parse(DefaultName, bytes.NewReader(defaultList))
	if err != nil {
		panic("image: the built-in default.list does not parse: " + err.Error())
	}
	return s
}

// Parse reads a package list (see default.list for the format). Its errors name the line.
func Parse(name string, r io.Reader) (*Spec, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(r, maxListBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxListBytes {
		return nil, fmt.Errorf("image %s: the list is larger than %d KiB: %w", name, maxListBytes>>10, errdefs.ErrInvalidArgument)
	}
	s := &Spec{Name: name}
	debs := map[string]bool{}
	bad := func(n int, format string, args ...any) error {
		return fmt.Errorf("image %s, line %d: %s: %w", name, n, fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		switch word {
		case "suite":
			if s.Suite != "" {
				return nil, bad(n, "a second suite line")
			}
			if !suitePattern().MatchString(rest) {
				return nil, bad(n, "suite %q is not a Debian release name (e.g. bookworm)", rest)
			}
			s.Suite = rest
		case "debian":
			fields := strings.Fields(rest)
			if len(fields) == 0 {
				return nil, bad(n, "debian names no package")
			}
			for _, p := range fields {
				if !debPattern().MatchString(p) {
					return nil, bad(n, "%q is not a Debian package name", p)
				}
				debs[p] = true
			}
		case "pip":
			if !pipPattern().MatchString(rest) || strings.HasPrefix(rest, "-") {
				return nil, bad(n, "%q is not a requirement (a name, extras and versions; no options, paths or URLs)", rest)
			}
			s.Pip = append(s.Pip, rest)
		default:
			return nil, bad(n, "unknown word %q: lines start with suite, debian or pip", word)
		}
		if len(debs)+len(s.Pip) > maxPackages {
			return nil, bad(n, "more than %d packages", maxPackages)
		}
	}
	if len(debs) == 0 {
		return nil, fmt.Errorf("image %s: the list names no Debian package: %w", name, errdefs.ErrInvalidArgument)
	}
	if s.Suite == "" {
		s.Suite = "bookworm"
	}
	if len(s.Pip) > 0 {
		debs["python3-pip"] = true // what installs them
	}
	for p := range debs {
		s.Debian = append(s.Debian, p)
	}
	sort.Strings(s.Debian)
	return s, nil
}

// recipe is the version of how an image is built from its list (Store.Build, finish): a
// change of it is a new hash, so images built the old way are built again.
const recipe = 3

// Hash identifies what the list builds: the same suite and packages, the same hash,
// whatever the order, comments or name.
func (s *Spec) Hash() string {
	h := sha256.New()
	fmt.Fprintf(h, "recipe %d\nsuite %s\n", recipe, s.Suite)
	for _, p := range s.Debian {
		fmt.Fprintf(h, "debian %s\n", p)
	}
	for _, p := range s.Pip {
		fmt.Fprintf(h, "pip %s\n", p)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// Dockerfile is a Dockerfile of the same image, for machines that can pull Debian's base
// image: the same packages on debian:SUITE-slim.
func (s *Spec) Dockerfile() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# cellbox image %q, from its package list (cellbox image dockerfile %s).\n", s.Name, s.Name)
	fmt.Fprintf(&b, "FROM debian:%s-slim\n", s.Suite)
	b.WriteString("RUN apt-get update \\\n && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\\n")
	for _, p := range s.Debian {
		fmt.Fprintf(&b, "    %s \\\n", p)
	}
	b.WriteString(" && rm -rf /var/lib/apt/lists/*\n")
	if len(s.Pip) > 0 {
		b.WriteString("RUN python3 -m pip install --no-cache-dir --break-system-packages")
		for _, p := range s.Pip {
			fmt.Fprintf(&b, " %q", p)
		}
		b.WriteString("\n")
	}
	// What Store.Build's finish does: the guest's mount point, and matplotlib's font cache
	// for this image's matplotlib and fonts.
	mpl := slices.Contains(s.Debian, "python3-matplotlib")
	if mpl {
		b.WriteString("RUN mkdir -p /.cellbox && MPLCONFIGDIR=" + MPLCachePath + " python3 -c 'import matplotlib.font_manager' \\\n")
		b.WriteString(" && chmod -R a+rX " + MPLCachePath + "\n")
	}
	fmt.Fprintf(&b, "LABEL cellbox.image=%q cellbox.hash=%q cellbox.mpl-cache=%q\n", s.Name, s.Hash(), strconv.FormatBool(mpl))
	return b.String()
}
