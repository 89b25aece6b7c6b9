package seccomp

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

// run evaluates prog on one system call as the kernel would: seccomp_data is read a 32-bit
// word at a time in the machine's order, which the VM (big-endian loads) gets by writing
// each word big-endian at its offset.
func run(t *testing.T, vm *bpf.VM, auditArch uint32, nr int, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.BigEndian.PutUint32(data[0:], uint32(nr))
	binary.BigEndian.PutUint32(data[4:], auditArch)
	for i, a := range args {
		lo, hi := 16+8*i, 20+8*i
		if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 { // big-endian machine: high word first
			lo, hi = hi, lo
		}
		binary.BigEndian.PutUint32(data[lo:], uint32(a))
		binary.BigEndian.PutUint32(data[hi:], uint32(a>>32))
	}
	v, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return uint32(v)
}

func TestProgram(t *testing.T) {
	b, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	if len(b)%8 != 0 || len(b)/8 > 4096 {
		t.Fatalf("program of %d bytes", len(b))
	}
	var raw []bpf.Instruction
	for i := 0; i < len(b); i += 8 {
		raw = append(raw, bpf.RawInstruction{Op: binary.NativeEndian.Uint16(b[i:]), Jt: b[i+2], Jf: b[i+3],
			K: binary.NativeEndian.Uint32(b[i+4:])}.Disassemble())
	}
	vm, err := bpf.NewVM(raw)
	if err != nil {
		t.Fatal(err)
	}
	info, err := arch.GetInfo("")
	if err != nil {
		t.Fatal(err)
	}
	nr := func(name string) int {
		n, ok := info.SyscallNames[name]
		if !ok {
			t.Fatalf("%s: no such call on %s", name, runtime.GOARCH)
		}
		return n
	}
	const allow, eperm, enosysRet = 0x7fff0000, 0x00050000 | 1, 0x00050000 | 38
	native := uint32(info.ID)
	cases := []struct {
		name string
		nr   int
		args []uint64
		want uint32
	}{
		{"read", nr("read"), nil, allow},
		{"openat", nr("openat"), nil, allow},
		{"mount", nr("mount"), nil, eperm},
		{"unshare", nr("unshare"), nil, eperm},
		{"setns", nr("setns"), nil, eperm},
		{"ptrace", nr("ptrace"), nil, eperm},
		{"bpf", nr("bpf"), nil, eperm},
		{"clone3", nr("clone3"), nil, enosysRet},
		{"clone of a thread", nr("clone"), []uint64{0x3d0f00}, allow},
		{"clone with CLONE_NEWUSER", nr("clone"), []uint64{0x10000000 | 0x11}, eperm},
		{"clone with CLONE_NEWNS", nr("clone"), []uint64{0x00020000}, eperm},
		{"personality query", nr("personality"), []uint64{0xffffffff}, allow},
		{"personality READ_IMPLIES_EXEC", nr("personality"), []uint64{0x0400000}, eperm},
	}
	for _, c := range cases {
		if got := run(t, vm, native, c.nr, c.args...); got != c.want {
			t.Errorf("%s: %#x, want %#x", c.name, got, c.want)
		}
	}
	if got := run(t, vm, native^0x80000000, nr("read")); got != eperm {
		t.Errorf("read of another ABI: %#x, want EPERM", got)
	}
	if runtime.GOARCH == "amd64" {
		if got := run(t, vm, native, nr("read")|0x40000000); got == allow {
			t.Errorf("x32 read: allowed")
		}
	}
}
