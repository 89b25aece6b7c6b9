package tool

import (
	"fmt"
	"strings"

	"github.com/cellbox/cellbox/api"
)

// maxNoteEntries is how many entries of a list NetworkNote names; the rest are counted.
const maxNoteEntries = 20

// NetworkNote tells a model what the code of a session with policy n may reach: nothing,
// the listed destinations, or the public internet, through the proxy the sandbox's
// environment already names; and which domains get credentials added on the way out (the
// domains only: never a header or a value).
func NetworkNote(n api.Network) string {
	var b strings.Builder
	switch {
	case n.Egress == api.EgressAllowlist && len(n.Allow) > 0:
		fmt.Fprintf(&b, "Network: the code may reach only %s, through the proxy that HTTP_PROXY and HTTPS_PROXY already name "+
			"(pip, curl, git, requests and urllib use it as they are). Any other host is refused with 403 Forbidden from the proxy: "+
			"don't retry it or look for another way out.", list(n.Allow))
	case n.Egress == api.EgressPublic:
		b.WriteString("Network: the code may reach the public internet through the proxy that HTTP_PROXY and HTTPS_PROXY already name " +
			"(pip, curl, git, requests and urllib use it as they are). Private and internal addresses are refused with 403 Forbidden from the proxy.")
	default:
		return "Network: this sandbox has no internet access. pip install, downloads and API calls fail: don't try them; use what is installed."
	}
	if len(n.Deny) > 0 {
		fmt.Fprintf(&b, " Refused as well: %s.", list(n.Deny))
	}
	var domains []string
	for _, s := range n.Secrets {
		domains = append(domains, s.Domain)
	}
	if len(domains) > 0 {
		fmt.Fprintf(&b, " Requests to %s get their credentials added by the server on the way out: call them without a token, "+
			"and don't look for one in the environment or the files (there is none).", list(domains))
	}
	return b.String()
}

// list joins entries for a sentence, naming at most maxNoteEntries.
func list(entries []string) string {
	if len(entries) <= maxNoteEntries {
		return strings.Join(entries, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(entries[:maxNoteEntries], ", "), len(entries)-maxNoteEntries)
}
