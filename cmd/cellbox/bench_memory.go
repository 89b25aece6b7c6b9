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

// workCell is what a working session has run: a describe() of a table and a PNG plot.
const workCell = "import pandas as pd, numpy as np, matplotlib.pyplot as plt\nfrom IPython.display import display\n" +
	"df = pd.DataFrame(np.random.rand(1000, 5), columns=list('abcde'))\n" +
	"display(df.describe())\nplt.plot(df.a.cumsum())\nplt.show()"

// idleMemory starts n sessions, lets them idle, and measures what each takes:
//   - avail: the drop of the host's available memory (MemAvailable in /proc/meminfo) from
//     before the sessions to after, divided by n: everything a session costs the host
//     (guest, kernel, page tables, the kernel's own objects, the server's share), with the
//     warm pool full both times;
//   - work: the further drop after a describe() and a plot in each of (up to) 20 of them;
//   - pss: the proportional set size (shared pages split among their users) of a session's
//     host processes (under runc the guest and the kernel; under gVisor the sentry, the
//     gofer and the stub processes), mean of the first 20;
//   - charge: what its cgroup is charged for but page cache: anon + shmem, where gVisor
//     keeps the sandbox's memory (a memfd), which its processes need not have mapped.
//
// The figure is only as good as the machine is quiet: run it alone.
func (b *bench) idleMemory(ctx context.Context, n int, r *benchResult) error {
	var ids []string
	defer func() {
		for _, id := range ids {
			b.c.DeleteSession(ctx, id)
		}
	}()
	settle := func() (float64, error) { return b.settle(ctx, "") }
	before, err := settle()
	if err != nil {
		return err
	}
	start := time.Now()
	for i := range n {
		s, err := b.c.CreateSession(ctx, api.CreateSessionRequest{})
		if err != nil {
			return fmt.Errorf("session %d of %d: %w", i+1, n, err)
		}
		ids = append(ids, s.ID)
		if _, err := b.c.Execute(ctx, s.ID, api.ExecuteRequest{Code: "x = 1"}); err != nil {
			return err
		}
		if (i+1)%50 == 0 {
			b.progress("%d sessions (%.0f s)", i+1, time.Since(start).Seconds())
		}
	}
	idle, err := settle()
	if err != nil {
		return err
	}
	r.avail, r.availN = (before-idle)/float64(n), n
	measured := ids[:min(len(ids), 20)]
	for _, id := range measured {
		key, err := b.cgroupKey(ctx, id)
		if err != nil {
			return err
		}
		p, c, err := cgroupMemory(key)
		if err != nil {
			return err
		}
		r.pss += p / float64(len(measured))
		r.charge += c / float64(len(measured))
	}
	for _, id := range measured {
		res, err := b.c.Execute(ctx, id, api.ExecuteRequest{Code: workCell})
		if err != nil {
			return err
		}
		if res.Status != api.StatusOK {
			return fmt.Errorf("describe and plot: %s %s", res.Status, res.Message)
		}
	}
	worked, err := settle()
	if err != nil {
		return err
	}
	r.work, r.workN = (idle-worked)/float64(len(measured)), len(measured)
	return nil
}

// settle waits for the warm pools (and lang's, if any) to be full and the host to be quiet,
// then reads its available memory.
func (b *bench) settle(ctx context.Context, lang string) (float64, error) {
	if err := b.waitPool(ctx); err != nil {
		return 0, err
	}
	if err := b.waitLangPool(ctx, lang); err != nil {
		return 0, err
	}
	time.Sleep(3 * time.Second)
	return memAvailable()
}

// memAvailable reads MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (float64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			return kb * 1024, err
		}
	}
	return 0, fmt.Errorf("no MemAvailable in /proc/meminfo")
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
