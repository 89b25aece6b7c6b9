package seccomp

import (
	"encoding/binary"
	"fmt"
	"runtime"

	bpfseccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// Program is Profile (not gVisor's) compiled to a classic BPF program for the server's own
// architecture, for a process that installs the filter itself (a kernel forked from a
// template, which no runtime starts): same allow-list, same clone and personality rules,
// EPERM for the rest, ENOSYS for clone3. It differs from runc's compilation of Profile in
// two ways: system calls of another ABI of the machine (i386 and x32 on x86_64, arm on
// arm64) are refused whole, where Profile lists those ABIs' calls too; and a call newer
// than any the list names gets EPERM, where runc answers ENOSYS (so a libc that falls back
// on ENOSYS does not). The guest under runc installs this program too (sandbox.GuestSeccomp).
//
// It returns the program as struct sock_filter entries in the machine's byte order, ready
// for seccomp(2).
func Program() ([]byte, error) {
	info, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp program for %s: %w", runtime.GOARCH, err)
	}
	known := func(names []string) []string {
		var out []string
		seen := map[string]bool{}
		for _, n := range names {
			if _, ok := info.SyscallNames[n]; ok && !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
		return out
	}
	flagsArg := uint32(cloneFlagsArg(runtime.GOARCH))
	var personality []bpfseccomp.NameWithConditions
	for _, p := range personalities {
		personality = append(personality, bpfseccomp.NameWithConditions{Name: "personality",
			Conditions: bpfseccomp.ArgumentConditions{{Argument: 0, Operation: bpfseccomp.Equal, Value: p}}})
	}
	policy := bpfseccomp.Policy{
		DefaultAction: bpfseccomp.ActionErrno, // EPERM
		Syscalls: []bpfseccomp.SyscallGroup{
			{Names: known(allowedSyscalls), Action: bpfseccomp.ActionAllow},
			{NamesWithCondtions: append(personality, bpfseccomp.NameWithConditions{Name: "clone",
				Conditions: bpfseccomp.ArgumentConditions{{Argument: flagsArg, Operation: bpfseccomp.BitsNotSet, Value: CloneNamespaceFlags}}}),
				Action: bpfseccomp.ActionAllow},
			{Names: known([]string{"clone3"}), Action: bpfseccomp.ActionErrno | bpfseccomp.Action(enosys)},
		},
	}
	insns, err := policy.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp program: %w", err)
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, fmt.Errorf("seccomp program: %w", err)
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.NativeEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.NativeEndian.AppendUint32(out, r.K)
	}
	return out, nil
}

const enosys = 38
