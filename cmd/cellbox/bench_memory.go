package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	mobyclient "github.com/moby/moby/client"

	"github.com/cellbox/cellbox/api"
)

// idleMemory starts n sessions, lets them idle, and returns two means per session: the
// proportional set size (PSS: shared pages split among their users) of its host processes
// (under runc the guest and the kernel; under gVisor the sentry, the gofer and the stub
// processes), and what its cgroup is charged for but page cache: anon + shmem, where
// gVisor keeps the sandbox's memory (a memfd), which its processes need not have mapped.
func (b *bench) idleMemory(ctx context.Context, n int) (pss, charge float64, err error) {
	var ids []string
	defer func() {
		for _, id := range ids {
			b.c.DeleteSession(ctx, id)
		}
	}()
	for range n {
		s, err := b.c.CreateSession(ctx, api.CreateSessionRequest{})
		if err != nil {
			return 0, 0, err
		}
		ids = append(ids, s.ID)
		if _, err := b.c.Execute(ctx, s.ID, api.ExecuteRequest{Code: "x = 1"}); err != nil {
			return 0, 0, err
		}
	}
	time.Sleep(2 * time.Second)
	for _, id := range ids {
		key, err := b.cgroupKey(ctx, id)
		if err != nil {
			return 0, 0, err
		}
		p, c, err := cgroupMemory(key)
		if err != nil {
			return 0, 0, err
		}
		pss += p
		charge += c
	}
	return pss / float64(n), charge / float64(n), nil
}

// cgroupKey is the last element of the cgroup path of session id's sandbox: the sandbox id
// under runc; under docker the container's id, found by the label the backend gives its
// containers (cellbox.session=<sandbox id>, which is the session's id).
func (b *bench) cgroupKey(ctx context.Context, id string) (string, error) {
	if b.docker == nil {
		return id, nil
	}
	list, err := b.docker.ContainerList(ctx, mobyclient.ContainerListOptions{
		Filters: make(mobyclient.Filters).Add("label", "cellbox.session="+id),
	})
	if err != nil {
		return "", fmt.Errorf("find the container of session %s: %w", id, err)
	}
	if len(list.Items) != 1 {
		return "", fmt.Errorf("find the container of session %s: %d running containers have its label", id, len(list.Items))
	}
	return list.Items[0].ID, nil
}

// cgroupMemory sums the PSS of every process whose cgroup path names key, and reads the
// anon and shmem charge of that cgroup (memory.stat, cgroup v1 or v2).
func cgroupMemory(key string) (pss, charge float64, err error) {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var memcg string
	for _, p := range procs {
		cg, err := os.ReadFile(filepath.Join(p, "cgroup"))
		if err != nil || !strings.Contains(string(cg), "/"+key) {
			continue
		}
		pss += smapsField(filepath.Join(p, "smaps_rollup"), "Pss:")
		for _, line := range strings.Split(string(cg), "\n") {
			// "4:memory:/path" (v1) or "0::/path" (v2)
			if f := strings.SplitN(line, ":", 3); len(f) == 3 && strings.HasSuffix(f[2], "/"+key) {
				if f[1] == "memory" {
					memcg = filepath.Join("/sys/fs/cgroup/memory", f[2])
				} else if f[0] == "0" && memcg == "" {
					memcg = filepath.Join("/sys/fs/cgroup", f[2])
				}
			}
		}
	}
	if memcg == "" {
		return 0, 0, fmt.Errorf("no process in a cgroup named %s found", key)
	}
	stat := filepath.Join(memcg, "memory.stat")
	if _, err := os.Stat(filepath.Join(memcg, "memory.current")); err == nil { // v2
		charge = statField(stat, "anon") + statField(stat, "shmem")
	} else {
		charge = statField(stat, "total_rss") + statField(stat, "total_shmem")
	}
	if charge == 0 {
		return 0, 0, fmt.Errorf("no memory charge in %s", stat)
	}
	return pss, charge, nil
}

// statField reads a field of a cgroup's memory.stat ("name value" lines, bytes).
func statField(path, field string) float64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+" "); ok {
			n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n
		}
	}
	return 0
}

func smapsField(path, field string) float64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) >= 2 && fs[0] == field {
			kb, _ := strconv.ParseFloat(fs[1], 64)
			return kb * 1024
		}
	}
	return 0
}

func bareImportRSS(python string) float64 {
	out, err := exec.Command(python, "-c", "import numpy, pandas, matplotlib, matplotlib.pyplot, IPython\n"+
		"print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmRSS')][0])").Output()
	if err != nil {
		return 0
	}
	kb, _ := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	return kb * 1024
}
