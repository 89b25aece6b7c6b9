package errdefs

import (
	"bytes"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
)

// apiCodes are the values of api's Code* constants, read from its source: a code added
// there and not here fails TestCodes.
func apiCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../api/types.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				if !strings.HasPrefix(n.Name, "Code") || i >= len(v.Values) {
					continue
				}
				if lit, ok := v.Values[i].(*ast.BasicLit); ok {
					s, _ := strconv.Unquote(lit.Value)
					codes = append(codes, s)
				}
			}
		}
	}
	if len(codes) == 0 {
		t.Fatal("no Code* constants in api/types.go")
	}
	return codes
}

// Every code of api is in the vocabulary, once, with a sentinel but internal, and New and
// Code agree on it.
func TestCodes(t *testing.T) {
	codes := Codes()
	if got, want := slices.Sorted(slices.Values(codes)), slices.Sorted(slices.Values(apiCodes(t))); !slices.Equal(got, want) {
		t.Fatalf("Codes() = %v, api's Code* constants are %v", got, want)
	}
	if codes[len(codes)-1] != api.CodeInternal {
		t.Errorf("Codes() does not end with internal: %v", codes)
	}
	seen := map[error]string{}
	for _, code := range codes {
		err := New(code, "the message")
		if got := Code(err); got != code {
			t.Errorf("Code(New(%q)) = %q", code, got)
		}
		if err.Error() != "the message" {
			t.Errorf("New(%q).Error() = %q, want the message alone", code, err.Error())
		}
		if code == api.CodeInternal {
			if errors.Unwrap(err) != nil {
				t.Errorf("New(internal) wraps %v", errors.Unwrap(err))
			}
			continue
		}
		s := errors.Unwrap(err)
		if s == nil || byCode[code] != s {
			t.Errorf("New(%q) unwraps to %v, want its sentinel", code, s)
		}
		if other, ok := seen[s]; ok {
			t.Errorf("codes %q and %q share a sentinel", code, other)
		}
		seen[s] = code
		if got := Code(s); got != code {
			t.Errorf("Code(sentinel of %q) = %q", code, got)
		}
	}
}

func TestCodeOfWrapped(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, api.CodeInternal},
		{"unclassified", errors.New("disk on fire"), api.CodeInternal},
		{"an unknown code", New("no_such_code", "x"), api.CodeInternal},
		{"wrapped with %w", fmt.Errorf("open x: %w", ErrNotFound), api.CodeNotFound},
		{"wrapped twice", fmt.Errorf("a: %w", fmt.Errorf("b: %w", New(api.CodeTooLarge, "c"))), api.CodeTooLarge},
		{"wrapped with %v", fmt.Errorf("open x: %v", ErrNotFound), api.CodeInternal},
		{"joined with an unclassified one", errors.Join(errors.New("x"), ErrUnavailable), api.CodeUnavailable},
		// More than one sentinel: the first of codeOrder, whatever the order of wrapping.
		{"not found and unavailable", fmt.Errorf("%w: %w", ErrUnavailable, ErrNotFound), api.CodeNotFound},
		{"unavailable and not found", fmt.Errorf("%w: %w", ErrNotFound, ErrUnavailable), api.CodeNotFound},
		{"invalid argument first of all", errors.Join(ErrUnauthenticated, ErrCanceled, ErrInvalidArgument), api.CodeInvalidArgument},
		{"too large before resource exhausted", errors.Join(ErrResourceExhausted, ErrTooLarge), api.CodeTooLarge},
		{"canceled before unavailable", errors.Join(ErrUnavailable, ErrCanceled), api.CodeCanceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := Code(c.err); got != c.want {
				t.Errorf("Code(%v) = %q, want %q", c.err, got, c.want)
			}
		})
	}
}

// codeOrder puts unavailable last: an error that says what is wrong (not found, too large,
// ...) is classified by that, not by the transport failure that carried it.
func TestCodeOrder(t *testing.T) {
	if len(codeOrder) != len(byCode) {
		t.Fatalf("codeOrder has %d codes, byCode %d", len(codeOrder), len(byCode))
	}
	for _, code := range codeOrder {
		if _, ok := byCode[code]; !ok {
			t.Errorf("codeOrder's %q has no sentinel", code)
		}
	}
	if codeOrder[len(codeOrder)-1] != api.CodeUnavailable {
		t.Errorf("codeOrder ends with %q, want unavailable", codeOrder[len(codeOrder)-1])
	}
}

func TestPublic(t *testing.T) {
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	internal := fmt.Errorf("open /var/lib/cellbox/x: permission denied")
	if got := Public(log, internal, "path", "/v1/x"); got != InternalMessage {
		t.Errorf("an internal error reads %q", got)
	}
	if l := logged.String(); !strings.Contains(l, "/var/lib/cellbox/x") || !strings.Contains(l, "path=/v1/x") {
		t.Errorf("the log has %q; want the error and the attrs", l)
	}
	logged.Reset()
	coded := fmt.Errorf("no session %q: %w", "s1", ErrNotFound)
	if got := Public(log, coded); got != coded.Error() || logged.Len() != 0 {
		t.Errorf("a classified error reads %q and logs %q", got, logged.String())
	}
}
