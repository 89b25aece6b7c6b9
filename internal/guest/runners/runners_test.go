package runners

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/cellbox/cellbox/internal/testbin"
)

// A cell's code reaches the shell as it was, whatever its bytes: quoting is the boundary
// between the code and the runner's line.
func TestBashQuote(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		testbin.Missing(t, "bash: %v", err)
	}
	cases := []string{"", "plain", "it's", `back\slash`, "$(touch /tmp/x) `id` $HOME", "a\nb\r\n\t", "é ü 日本 🎉",
		"\x01\x7f\xff\xfe", `'; echo broken; '`, "\\x41", "trailing\\"}
	var script strings.Builder
	for _, c := range cases {
		var b strings.Builder
		quote(&b, c)
		script.WriteString("printf '%s\\0' " + b.String() + "\n")
	}
	out, err := exec.Command("bash", "--noprofile", "--norc", "-c", script.String()).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(string(out), "\x00")
	for i, c := range cases {
		if got[i] != c {
			t.Errorf("case %d: bash read %q, want %q", i, got[i], c)
		}
	}
	if line := BashCell("echo hi\nexit", true, nil); strings.Count(line, "\n") != 1 || !strings.HasPrefix(line, "__cellbox_cell 1 $'") {
		t.Errorf("BashCell: %q", line)
	}
}
