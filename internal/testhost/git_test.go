package testhost

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGit clones the repository with git itself.
func TestGit(t *testing.T) {
	files := map[string]string{"README": "hello\n", "dir/b.txt": "in a folder\n"}
	tests := []struct {
		name   string
		opts   []GitOptions
		config []string // git -c ...
		ok     bool
	}{
		{"open", nil, nil, true},
		{"header given", []GitOptions{{RequireHeader: "Authorization", Value: "Bearer x"}}, []string{"-c", "http.extraHeader=Authorization: Bearer x"}, true},
		{"header missing", []GitOptions{{RequireHeader: "Authorization", Value: "Bearer x"}}, nil, false},
		{"header wrong", []GitOptions{{RequireHeader: "Authorization", Value: "Bearer x"}}, []string{"-c", "http.extraHeader=Authorization: Bearer y"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(Git(t, files, tt.opts...))
			defer srv.Close()
			dst := filepath.Join(t.TempDir(), "clone")
			cmd := exec.Command("git", append(tt.config, "clone", "-q", srv.URL+"/repo.git", dst)...)
			cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
			out, err := cmd.CombinedOutput()
			if !tt.ok {
				if err == nil {
					t.Fatal("git clone succeeded without the required header")
				}
				return
			}
			if err != nil {
				t.Fatalf("git clone: %v\n%s", err, out)
			}
			for name, want := range files {
				got, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(name)))
				if err != nil || string(got) != want {
					t.Errorf("%s: %q, %v; want %q", name, got, err, want)
				}
			}
		})
	}
}
