# cellbox kernel template: one prepared Python process per root filesystem whose forks become
# kernels inside sandboxes (see docs/ARCHITECTURE.md, "Kernels forked from a template").
#
# The server starts it (package template) as root on the host, in mount, network, ipc and
# uts namespaces of its own, on the root the sandboxes have (the host's or an image's), with:
#   descriptor 0  a pipe from the server: its end (EOF) ends the template
#   descriptor 1  a pipe to the server: "ready\n" once the template takes requests
#   descriptor 2  the template's log
#   descriptor 3  a listening Unix socket, which every sandbox on this root has bound at
#                 /.cellbox/run/template/ (root-only: user code cannot reach it)
#   CELLBOX_TEMPLATE  its configuration (JSON), removed from the environment at once
#
# A guest asks for a kernel with one message: a JSON line {"python", "cwd", "env"} and six
# descriptors: a pidfd of itself, then what become the kernel's descriptors 0 to 4. The
# kernel goes into the sandbox of the process that asked, and nowhere else: the peer's
# credentials must be root and name the same process as the pidfd. A fork of the template
# (the intermediate) joins that process's cgroups, takes its resource limits and enters its
# namespaces; it forks once more (the pid namespace applies to children) and exits; that
# child forks the kernel, writes "pid N\n" (N in the sandbox's pid namespace) and exits, so
# the kernel is re-parented to the guest, process 1 of the sandbox. The kernel makes its own
# session, takes its descriptors, drops every capability and becomes the user, sets
# no_new_privs and the seccomp filter, closes every other descriptor, enters the working
# folder and takes the guest's environment; only then does the runner read its first cell.
# Errors go back as "error TEXT\n". Nothing else is answered: the guest reads to EOF.
import os
import sys


def _template():
    import base64
    import ctypes
    import gc
    import json
    import resource
    import select
    import signal
    import socket
    import struct
    import threading
    import time

    gc.disable()  # no collection dirties shared pages before the freeze
    import fcntl
    import stat

    # Descriptors 3 and 4 become each kernel's protocol pipes, so no object made here may
    # hold them: the socket moves up, and /dev/null holds both places meanwhile.
    lfd = fcntl.fcntl(3, fcntl.F_DUPFD_CLOEXEC, 100)
    os.close(3)
    os.dup2(os.open(os.devnull, os.O_RDWR), 4)
    os.open(os.devnull, os.O_RDWR)  # 3
    cfg = json.loads(os.environ.pop("CELLBOX_TEMPLATE"))
    runner_src = os.environ.pop("CELLBOX_RUNNER")
    uid, gid = int(cfg["uid"]), int(cfg["gid"])
    if uid <= 0 or gid <= 0:
        raise SystemExit("cellbox template: the user must not be root")
    python = cfg["python"]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    # On Python 3.11, fork(2) itself, with the GIL held (PyDLL), without os.fork's work in
    # the child (the interpreter's after-fork reset and the at-fork hooks of threading,
    # random, logging, matplotlib: ~250 pages written in each child, ~6 ms on a VM here).
    # Only while this process has one thread (checked once the pre-imports ran: an import
    # may start one), so that the locks those renew are free. What of it matters is done by
    # hand: a spare reseeds random (and numpy), the kernel sets its thread's native id;
    # matplotlib's font cache is empty (cleared before any fork). glibc's own atfork
    # handlers (OpenSSL's among them) still run. Another Python, whose after-fork reset was
    # not checked against this, forks with os.fork.
    _fork = ctypes.PyDLL(None, use_errno=True).fork
    _fork.restype = ctypes.c_int
    _fork.argtypes = []
    raw_fork = []  # [True] once checked and allowed

    def fork():
        if not raw_fork:
            return os.fork()
        pid = _fork()
        if pid < 0:
            e = ctypes.get_errno()
            raise OSError(e, "fork: " + os.strerror(e))
        return pid

    def check(ret, what):
        if ret != 0:
            e = ctypes.get_errno()
            raise OSError(e, what + ": " + os.strerror(e))

    # The seccomp program, as struct sock_filter entries, kept for every child.
    prog_bytes = base64.b64decode(cfg["seccomp"])
    if not prog_bytes or len(prog_bytes) % 8:
        raise SystemExit("cellbox template: no seccomp program")
    prog_buf = ctypes.create_string_buffer(prog_bytes, len(prog_bytes))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog_bytes) // 8, ctypes.addressof(prog_buf))

    class CapHeader(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class CapData(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    cap_header = CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    cap_none = (CapData * 2)()  # made here: a kernel allocates less
    CAP_LINES = (b"\nCapInh:\t", b"\nCapPrm:\t", b"\nCapEff:\t", b"\nCapBnd:\t", b"\nCapAmb:\t")

    # Where each cgroup hierarchy is mounted: controller (or "" for cgroup2) -> (root, mount point).
    mounts = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            a, b = pre.split(), post.split()
            if len(a) < 5 or len(b) < 3:
                continue
            if b[0] == "cgroup2":
                mounts.setdefault("", (a[3], a[4]))
            elif b[0] == "cgroup":
                for o in b[2].split(","):
                    if o.startswith("name=") or (o not in ("rw", "ro") and "=" not in o):
                        mounts.setdefault(o, (a[3], a[4]))

    def cgroup_files(pid):
        # The cgroup.procs file of every hierarchy process pid is in, on the host.
        out = []
        with open("/proc/%d/cgroup" % pid) as f:
            for line in f:
                hid, ctrls, path = line.rstrip("\n").split(":", 2)
                key = "" if hid == "0" else ctrls.split(",")[0]
                if key not in mounts:
                    if hid == "0":
                        continue  # cgroup2 unmounted (cgroup v1 alone): it has no controllers
                    raise OSError("cgroup hierarchy %r of the sandbox is not mounted here" % (ctrls or "cgroup2"))
                root, point = mounts[key]
                rel = os.path.relpath(path, root)
                if rel == ".." or rel.startswith("../"):
                    raise OSError("cgroup %s is outside its mount" % path)
                out.append(os.path.join(point, rel, "cgroup.procs"))
        return out

    def fdinfo_pid(fd):
        with open("/proc/self/fdinfo/%d" % fd) as f:
            for line in f:
                if line.startswith("Pid:"):
                    return int(line.split()[1])
        return None

    # The kernel-to-be: the runner's shell, the pre-imports, and what a first cell and a
    # first plot load, all done once here and shared by every kernel.
    runner = {"__name__": "cellbox_runner", "__builtins__": __builtins__}
    exec(compile(runner_src, "<cellbox-runner>", "exec"), runner)
    shell, serve = runner["prepare"]()
    t0 = time.monotonic()
    # The pre-imports as the guest runs them in a kernel (a cell without history: its
    # outputs go to /dev/null, on descriptor 4 for now), which also warms IPython's cell
    # machinery and display hooks.
    for code in (cfg.get("preimport") or "", "pass", "1"):
        r = shell.run_cell(code, store_history=False)
        err = r.error_before_exec or r.error_in_exec
        if err is not None:
            print("cellbox template: the preimport code failed here:", type(err).__name__, err, file=sys.stderr)
    scratch = {}
    try:
        exec(compile(WARM, "<warm-up>", "exec"), scratch)
    except Exception as e:  # an image without pandas or matplotlib
        print("cellbox template: warm-up:", type(e).__name__, e, file=sys.stderr)
    for v in scratch.get("objs", ()):
        try:
            shell.display_formatter.format(v)
        except Exception:
            pass
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is not None:
        plt.close("all")  # else every kernel's first cell would show the warm-up's figure
    scratch.clear()
    # matplotlib keeps its fonts' files open: every kernel would share their offsets.
    fm = sys.modules.get("matplotlib.font_manager")
    if fm is not None and hasattr(getattr(fm, "_get_font", None), "cache_clear"):
        fm._get_font.cache_clear()
    gc.collect()

    # Descriptors the prepared objects hold (IPython's /dev/null): in a kernel each of these
    # numbers becomes the sandbox's own /dev/null (closing them would leave those objects on
    # numbers the kernel reuses; keeping them would share the template's files with every
    # kernel). One that is not /dev/null here is said here.
    held = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd <= 4 or fd == lfd:
            continue
        try:
            st = os.fstat(fd)
        except OSError:
            continue  # the listing's own descriptor
        held.append(fd)
        if not (stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)):
            print("cellbox template: descriptor %d (%s) will be /dev/null in kernels" % (fd, os.readlink("/proc/self/fd/%d" % fd)), file=sys.stderr)
    print("cellbox template: ready in %.2fs" % (time.monotonic() - t0), file=sys.stderr)
    if sys.version_info[:2] == (3, 11):
        if threading.active_count() == 1 and len(os.listdir("/proc/self/task")) == 1:
            raw_fork.append(True)
        else:
            print("cellbox template: a thread runs here (the pre-imports started one?): kernels fork with os.fork, slower", file=sys.stderr)

    # The template's own confinement: of root's capabilities it keeps only what putting a
    # kernel into a sandbox takes (setns: SYS_ADMIN and SYS_CHROOT, and SYS_PTRACE, as setns
    # through a pidfd is a ptrace-mode check on a guest that is not dumpable; a guest's
    # resource limits: SYS_RESOURCE; becoming the user: SETUID, SETGID, and SETPCAP to empty
    # the bounding set), in every set, bounding included, so that a request that found a
    # way to run code here could not load modules, reach raw devices, configure networks,
    # or override file permissions. no_new_privs: nothing it or a fork runs gains any.
    keep = (21, 18, 19, 24, 7, 6, 8)  # SYS_ADMIN, SYS_CHROOT, SYS_PTRACE, SYS_RESOURCE, SETUID, SETGID, SETPCAP
    for n in range(last_cap + 1):
        if n not in keep:
            check(libc.prctl(24, n, 0, 0, 0), "drop capability %d from the bounding set" % n)  # PR_CAPBSET_DROP
    check(libc.prctl(47, 4, 0, 0, 0), "clear the ambient capabilities")  # PR_CAP_AMBIENT, CLEAR_ALL
    own = (CapData * 2)()
    check(libc.capget(ctypes.byref(CapHeader(0x20080522, 0)), own), "capget")
    mask = sum(1 << n for n in keep) & own[0].permitted  # every kept one is below 32; root may lack some
    own[0].effective, own[0].permitted, own[0].inheritable = mask, mask, 0
    own[1].effective = own[1].permitted = own[1].inheritable = 0
    check(libc.capset(ctypes.byref(CapHeader(0x20080522, 0)), own), "capset")
    check(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS

    lsock = socket.socket(fileno=lfd)
    NS_FLAGS = 0x00020000 | 0x04000000 | 0x08000000 | 0x40000000 | 0x20000000 | 0x02000000  # mnt uts ipc net pid cgroup
    RLIMITS = [getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_")]

    phase = {"kernel": False}

    def read_guest(guest):
        # What the kernel takes from the guest: its cgroups, resource limits and umask.
        paths = cgroup_files(guest)
        limits = []
        for r in RLIMITS:
            try:
                limits.append((r, resource.prlimit(guest, r)))
            except (OSError, ValueError):
                pass
        fd = os.open("/proc/%d/status" % guest, os.O_RDONLY | os.O_CLOEXEC)
        try:
            status = os.read(fd, 1 << 16)
        finally:
            os.close(fd)
        umask = next((int(l.split()[1], 8) for l in status.split(b"\n") if l.startswith(b"Umask:")), 0o022)
        return paths, limits, umask

    def rehearse():
        # A spare checks a request of its own while no guest waits, so that the pages the
        # check writes are its own when a guest's comes (on a VM here each first write
        # to a page shared with the template costs 15 to 70 us).
        a, b = socket.socketpair()
        fds = [os.pidfd_open(os.getpid())] + [os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC) for _ in range(5)]
        try:
            env = ["%s=%s" % kv for kv in os.environ.items()]
            msg = json.dumps({"python": python, "cwd": "/", "env": env, "preimport": cfg.get("preimport") or ""}).encode()
            socket.send_fds(a, [msg + b"\n"], fds)
            a.shutdown(socket.SHUT_WR)
            _, got, pid = check_request(b)
            for fd in got:
                os.close(fd)
            read_guest(pid)
        finally:
            for fd in fds:
                os.close(fd)
            a.close()
            b.close()

    def become_kernel(conn, fds, req, guest):
        # The intermediate: into the sandbox, then two forks. What is read through the
        # guest's pid (its cgroups, limits, umask) is read first, then the pidfd must show
        # the guest still alive: its pid named no other process meanwhile.
        paths, limits, umask = read_guest(guest)
        signal.pidfd_send_signal(fds[0], 0)
        for path in paths:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
        for r, v in limits:
            try:
                resource.setrlimit(r, v)
            except (OSError, ValueError):
                pass
        check(libc.setns(fds[0], NS_FLAGS), "setns")
        m = fork()
        if m:
            # The intermediate reaps the child in the sandbox's pid namespace, which would
            # otherwise be a zombie there that nobody reaps (the namespace could not end).
            # That child is root in the sandbox's namespace, where the guest may stop it:
            # it gets 5 s, then is killed, so that no guest can hold a fork of the template.
            os.close(conn.fileno())
            pfd = os.pidfd_open(m)
            if not select.select([pfd], [], [], 5)[0]:
                os.kill(m, signal.SIGKILL)
            os.waitpid(m, 0)
            os._exit(0)  # the template reaps the intermediate
        k = fork()
        if k:
            conn.sendall(b"pid %d%s\n" % (k, b" preimported" if req.get("preimported") else b""))
            os.close(conn.fileno())  # EOF for the guest does not wait for this exit
            os._exit(0)  # the kernel goes to the sandbox's process 1
        # The kernel.
        os.setsid()
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
        os.write(fd, b"1000")  # the OOM killer's first choice, never the guest
        os.close(fd)
        high = [os.dup(fd) for fd in fds[1:]]
        for target, fd in enumerate(high):
            os.dup2(fd, target)
        phase["kernel"] = True  # errors go to the kernel's stderr now: conn's number is reused
        # Every other descriptor goes while still root, before anything of the user's can
        # reach this process: those the prepared objects hold become the sandbox's own
        # /dev/null (a number they use must stay valid, and must not be the template's or
        # shared with other kernels), the rest are closed.
        conn.detach()  # the socket objects must not close numbers reused below
        lsock.detach()
        null = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
        for fd in held:
            os.dup2(null, fd, inheritable=False)
        low = 5
        for fd in sorted(held + [null]) + [1 << 20]:
            os.closerange(low, fd)
            low = fd + 1
        os.close(null)
        for n in range(last_cap + 1):
            check(libc.prctl(24, n, 0, 0, 0), "drop capability %d from the bounding set" % n)  # PR_CAPBSET_DROP
        check(libc.prctl(47, 4, 0, 0, 0), "clear the ambient capabilities")  # PR_CAP_AMBIENT, CLEAR_ALL
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        check(libc.capset(ctypes.byref(cap_header), cap_none), "capset")
        if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
            raise OSError("the user was not set")
        fd = os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)
        status = os.read(fd, 8192)
        os.close(fd)
        for name in CAP_LINES:  # each is followed by 16 hex digits
            at = status.find(name)
            if at < 0 or status[at + len(name):at + len(name) + 16] != b"0" * 16:
                raise OSError("capabilities left: " + status[at:at + len(name) + 16].decode(errors="replace"))
        check(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS
        check(libc.prctl(22, 2, ctypes.addressof(fprog), 0, 0), "seccomp")  # PR_SET_SECCOMP, FILTER
        # Dumpable, as an exec'd kernel is (its /proc/self is the user's): only now, with the
        # filter on and nothing of the template's left.
        check(libc.prctl(4, 1, 0, 0, 0), "dumpable")  # PR_SET_DUMPABLE
        os.umask(umask)
        os.chdir(req["cwd"])
        runner["apply_env"](req["env"])
        if "PYTHONPATH" in os.environ:  # the template had none (else it would differ)
            sys.path[1:1] = [p for p in os.environ["PYTHONPATH"].split(":") if p]
        main = threading.main_thread()
        if hasattr(main, "_set_native_id"):
            main._set_native_id()  # else the template's thread id, which os.fork renews
        gc.enable()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)

    class EnvDiffers(ValueError):
        pass  # the guest starts this kernel afresh: expected, not a failure

    def fail(conn, e):
        # "error CODE MESSAGE": the guest classifies by CODE ("env" or "failed"), never by
        # the message, which is for people.
        code = "env" if isinstance(e, EnvDiffers) else "failed"
        text = ("error %s %s\n" % (code, str(e).replace("\n", " ")[:1000])).encode()
        if phase["kernel"]:
            os.write(2, b"cellbox: the kernel could not start: " + text)
        else:
            conn.sendall(text)

    def check_request(conn):
        # The request on conn, checked: (request, descriptors, guest's pid). The caller closes
        # the descriptors.
        # 5 s for the whole request: a guest that sends it a byte at a time holds one fork
        # (of 16) no longer than one that sends nothing.
        deadline = time.monotonic() + 5
        conn.settimeout(5)
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        peer, peer_uid, _ = struct.unpack("3i", creds)
        msg, fds, flags, _ = socket.recv_fds(conn, 1 << 16, 8)
        try:
            if flags & socket.MSG_CTRUNC:
                raise ValueError("too many descriptors")
            if peer_uid != 0:
                raise ValueError("only the guest may ask for a kernel")
            if len(fds) != 6:
                raise ValueError("want 6 descriptors, got %d" % len(fds))
            while not msg.endswith(b"\n"):
                if len(msg) > 256 << 10:  # parsed before the sandbox's cgroups are joined
                    raise ValueError("request too large")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ValueError("request too slow")
                conn.settimeout(left)
                more = conn.recv(1 << 16)
                if not more:
                    raise ValueError("request cut short")
                msg += more
            req = json.loads(msg)
            if not isinstance(req, dict) or not isinstance(req.get("cwd"), str) or not isinstance(req.get("env"), list) \
                    or not all(isinstance(kv, str) and "\0" not in kv for kv in req["env"]):
                raise ValueError("malformed request")
            if req.get("python") != python:
                raise ValueError("this template runs %s, not %s" % (python, req.get("python")))
            k = runner["env_differs"](req["env"], ("PYTHONPATH",))
            if k:
                raise EnvDiffers("environment: %s differs from the template's" % k)
            if fdinfo_pid(fds[0]) != peer:
                raise ValueError("the first descriptor must be a pidfd of the guest that asks")
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        req = {"cwd": req["cwd"], "env": req["env"], "preimported": req.get("preimport") == cfg.get("preimport")}
        return req, fds, peer

    def fork_spare():
        # The next request's process, forked ahead of it so that the request does not wait
        # for a fork of the template: it accepts one connection, tells the template so
        # (closing its end of a pipe: the template forks the next spare), checks the
        # request and becomes the intermediate. It dies with the template until it has a
        # connection.
        r, w = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        gc.freeze()
        pid = fork()
        if pid:
            os.close(w)
            return pid, r
        try:
            os.close(r)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the template's reaper; this one waits itself
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            check(libc.prctl(1, signal.SIGKILL, 0, 0, 0), "parent death signal")  # PR_SET_PDEATHSIG
            if os.getppid() != template_pid:
                os._exit(0)
            # Each kernel's own random state (os.fork's hook for random does not run here).
            for name in ("random", "numpy.random"):
                m = sys.modules.get(name)
                if m is not None:
                    m.seed()
            try:
                rehearse()
            except Exception as e:  # only slower: the request is checked all the same
                print("cellbox template: spare: rehearsal:", type(e).__name__, e, file=sys.stderr)
            lsock.setblocking(True)
            while True:
                try:
                    conn, _ = lsock.accept()
                    break
                except InterruptedError:
                    continue
            check(libc.prctl(1, 0, 0, 0, 0), "parent death signal")
            os.close(w)
        except BaseException as e:
            print("cellbox template: spare:", type(e).__name__, e, file=sys.stderr)
            os._exit(1)
        try:
            req, fds, guest = check_request(conn)
        except BaseException as e:
            try:
                fail(conn, e)
            finally:
                os._exit(0)
        try:
            become_kernel(conn, fds, req, guest)
        except BaseException as e:
            try:
                fail(conn, e)
            finally:
                os._exit(1)
        serve()  # the kernel: the runner's loop, which never returns
        os._exit(0)

    # At most this many forks at once (the spare and those handling requests, which take
    # milliseconds unless a guest is slow to send its request): guests that open
    # connections and send nothing cannot make the template fork without end.
    max_children = 16
    children = set()
    template_pid = os.getpid()
    gc.collect()
    gc.freeze()
    spare, spare_r = fork_spare()
    children.add(spare)
    os.write(1, b"ready\n")
    def reap(*_):
        # The forks exit as soon as their kernel is forked; reaped at once, as a zombie is
        # still in the sandbox's cgroups (which could not be removed).
        while children:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                break
            if pid == 0:
                break
            children.discard(pid)

    signal.signal(signal.SIGCHLD, reap)
    took = None  # when the last spare took a connection

    def next_spare_in():
        return 0 if took is None else took + SPARE_AFTER - time.monotonic()
    while True:
        reap()
        pending = False
        if spare_r is None and len(children) < max_children:
            # The next spare is forked once the last request is about done with (a fork of
            # the template beside a kernel's start slows both: on a VM every page-table
            # change is costly), or at once when a connection waits for it.
            wait = next_spare_in()
            if wait > 0:
                pending = bool(select.select([lfd], [], [], 0)[0])
            if wait <= 0 or pending:
                # The reaper must not see this child before it is in the set.
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
                try:
                    spare, spare_r = fork_spare()
                    children.add(spare)
                finally:
                    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        if spare_r is not None:
            watch, timeout = [0, spare_r], 1.0
        elif len(children) < max_children:
            watch, timeout = [0, lfd], max(0.0, min(0.1, next_spare_in()))
        else:
            watch, timeout = [0], 0.1  # until a fork ends
        ready, _, _ = select.select(watch, [], [], timeout)
        if 0 in ready and not os.read(0, 64):
            os._exit(0)  # the server is gone
        if spare_r is not None and spare_r in ready:
            os.read(spare_r, 64)  # EOF: the spare took a connection, or died
            os.close(spare_r)
            spare_r = None
            took = time.monotonic()


# How long after a spare took a request the template forks the next one, unless another
# request waits: the kernel of the first is about ready by then (~40 ms here).
SPARE_AFTER = 0.1


WARM = """
import io
import pandas as pd
import matplotlib.pyplot as plt
df = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": ["x", "y", "z"], "t": pd.to_datetime(["2024-01-01"] * 3)})
objs = [df, df.describe(), df.groupby("b").sum(numeric_only=True)]
fig = plt.figure()
plt.plot([1, 2, 3])
plt.title("warm-up")
fig.savefig(io.BytesIO(), format="png")
objs.append(fig)
"""

_template()
