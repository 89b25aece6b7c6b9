# cellbox kernel runner: drives an IPython InteractiveShell for the guest.
#
# The guest starts this script (see pyrunner.go) and talks to it over file descriptors 3
# (guest -> runner) and 4 (runner -> guest), one JSON message a line. Descriptors 1 and 2
# are pipes the guest reads: everything the user's code (and any C code or child process)
# writes there is a stream output. This script never writes to them itself.
#
# guest -> runner:  {"op": "exec", "code": "...", "silent": false, "quiet": false, "ctx": "name", "env": {...},
#                    "du": false, "ux": {"key": "expression", ...}, "stdin": false, "tr": false}
#                        runs code in execution context ctx ("" or absent: the default),
#                        with env set in os.environ for the cell only; silent (the
#                        pre-imports) or quiet (a tool's call, or a cell run without
#                        history): not counted, not in the history (In, Out, _); du: send
#                        display ids, update_display_data and clear_output; ux: user
#                        expressions, evaluated after the code, answered in "done"; stdin:
#                        input() and getpass() ask the guest ("input" below), else fail;
#                        tr: report the cell's durations in "done"
#                   {"op": "input", "value": "..."} or {"op": "input", "error": "..."}
#                        the answer to an "input" (read only while one waits)
#                   {"op": "complete", "code": "...", "pos": N, "ctx": "name"}
#                   {"op": "inspect", "code": "...", "pos": N, "detail": 0|1, "ctx": "name"}
#                   {"op": "is_complete", "code": "..."}
#                        answered by "done" with "reply": Jupyter's reply content
#                   {"op": "drop", "ctx": "name"}   forgets a named context; answered "done"
#                   {"op": "ping"}          answered "done": the runner reads its commands
#                   {"op": "env", "env": ["K=V", ...]}   the whole environment, unless a
#                        variable read at start differs: then "done" with ok false
#                   {"op": "ack"}           (answer to every message with "a": 1)
# runner -> guest:  {"t": "started", "n": N}   the cell runs; SIGINT now interrupts it
#                   {"t": "out", "o": {...}, "a": 1}
#                        an output (api.Output). From the main thread it waits for the
#                        ack, so stream text written after it stays after it. Other
#                        threads do not wait: only the main thread ever reads fd 3.
#                   {"t": "tools", "tools": [{"name", "description", "input_schema",
#                        "source", "save"}, ...]}   after a run (not a silent one) that
#                        changed the tools (module cellbox), before its "done": all of them
#                   {"t": "input", "prompt": "...", "password": bool}   a cell's input() or getpass()
#                        waits for the value (the guest asks its caller)
#                   {"t": "done", "ok": bool, "ename": "...", "n": N, "ux": {...}, "reply": {...},
#                    "tr": {"runner": ns, "run_cell": ns}}
#                        ux: the user expressions' answers, each an output (display_data
#                        or error); reply: a complete, inspect or is_complete's answer;
#                        tr (an exec with tr): the runner's time from reading the cell to
#                        writing this, and IPython's run_cell in it, in nanoseconds of its
#                        monotonic clock
#
# The runner puts module cellbox (cellbox.py, whose source is CELLBOX_MODULE, set before
# this script by package pyrunner) into sys.modules: `from cellbox import tool` works in
# every kernel, and a template's forks inherit it. No file is written.
import os
import sys

# Environment variables read when Python or a library starts: a process that started with
# other values cannot take them later (a template's fork, or a kernel given a session's env).
SENSITIVE = ("PYTHON", "LD_", "OPENBLAS", "OMP_", "MKL_", "GOTO", "MPL", "MALLOC", "LC_", "LANG", "IPYTHON", "TZDIR")


def env_differs(env, handled=()):
    """The first variable of SENSITIVE (but those in handled) that env ("K=V" strings) sets
    otherwise than os.environ, or None."""
    want = {}
    for kv in env:
        k, _, v = kv.partition("=")
        want[k] = v
    for k in sorted(set(want) | set(os.environ)):
        if k.startswith(SENSITIVE) and k not in handled and want.get(k) != os.environ.get(k):
            return k
    return None


def apply_env(env):
    """Makes env ("K=V" strings) the process's whole environment. Only what differs is
    changed: a kernel forked from a template mostly has its environment already, and each
    page written in a fresh fork costs a page fault."""
    import time
    want = {}
    for kv in env:
        k, _, v = kv.partition("=")
        if k:
            want[k] = v
    tz = os.environ.get("TZ")
    for k in [k for k in os.environ if k not in want]:
        del os.environ[k]
    for k, v in want.items():
        if os.environ.get(k) != v:
            os.environ[k] = v
    sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
    if os.environ.get("TZ") != tz:
        time.tzset()


def install_cellbox():
    """Makes module cellbox importable (from CELLBOX_MODULE) and returns it."""
    import types

    mod = types.ModuleType("cellbox")
    sys.modules["cellbox"] = mod
    exec(compile(CELLBOX_MODULE, "<cellbox>", "exec"), mod.__dict__)
    return mod


def prepare():
    """Imports IPython and builds the shell; returns serve, which runs the protocol loop on
    descriptors 3 and 4. A template process (template.py) calls prepare once and serve in
    each child it forks; a kernel on its own calls both."""
    import gc
    import io
    import json
    import re
    import signal
    import threading
    import time

    cellbox = install_cellbox()
    reported = {"v": cellbox._version}  # the tools' version last reported

    pipes = {}  # "r": the buffered reader of descriptor 3, once serve runs
    wfd = 4

    # Never let SIGINT hit the runner's own loop: it only raises while a cell runs.
    state = {"armed": False, "in_send": False, "pending": False, "du": False, "asking": False, "stdin": False}
    main_thread = threading.main_thread()

    def on_sigint(signum, frame):
        if not state["armed"]:
            return
        if state["in_send"]:
            state["pending"] = True
            return
        if state["asking"] and signum == signal.SIGINT:
            # A completer or inspector swallows exceptions (a bare except around each
            # matcher): raise again every 50 ms until the question gives up.
            signal.setitimer(signal.ITIMER_REAL, 0.05, 0.05)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)

    for s in (sys.stdout, sys.stderr):
        try:
            s.reconfigure(encoding="utf-8", errors="backslashreplace", line_buffering=True)
        except Exception:
            pass

    try:
        import ctypes

        _fflush = ctypes.CDLL(None).fflush
        _fflush.argtypes = [ctypes.c_void_p]
    except Exception:
        _fflush = None

    _encode = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), allow_nan=False, default=str).encode

    def finite(v):
        # JSON has no NaN or Infinity: write them as Jupyter does, as strings.
        if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
            return repr(v)
        if isinstance(v, dict):
            return {str(k): finite(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [finite(x) for x in v]
        return v

    def encode(msg):
        try:
            return _encode(msg)
        except (ValueError, TypeError, RecursionError):
            pass
        try:
            return _encode(finite(msg))
        except (ValueError, TypeError, RecursionError):
            pass
        o = msg.get("o")
        if isinstance(o, dict):
            o.pop("metadata", None)
            if isinstance(o.get("data"), dict):
                o["data"] = {k: v if isinstance(v, str) else str(v) for k, v in o["data"].items()}
        return _encode(msg)
    send_lock = threading.Lock()

    def flush_streams():
        for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                s.flush()
            except Exception:
                pass
        if _fflush is not None:
            try:
                _fflush(None)
            except Exception:
                pass

    def send(msg, ack=False):
        # Streams first: the guest drains the stream pipes before it handles a message.
        flush_streams()
        is_main = threading.current_thread() is main_thread
        ack = ack and is_main
        if ack:
            msg["a"] = 1
        data = (encode(msg) + "\n").encode("ascii")
        with send_lock:
            if is_main:
                state["in_send"] = True
            try:
                view = memoryview(data)
                while view:
                    n = os.write(wfd, view)
                    view = view[n:]
                if ack and "r" in pipes:  # no reader: a template's warm-up, whose output goes nowhere
                    if not pipes["r"].readline():
                        os._exit(0)
            finally:
                if is_main:
                    state["in_send"] = False
        if is_main and state["pending"]:
            state["pending"] = False
            if state["armed"]:
                raise KeyboardInterrupt

    import base64

    def jsonable_mime(mime):
        return mime == "application/json" or mime.endswith("+json")

    def clean_bundle(data):
        out = {}
        for mime, v in (data or {}).items():
            mime = str(mime)
            if jsonable_mime(mime) and not isinstance(v, (bytes, bytearray)):
                out[mime] = v
            elif isinstance(v, (bytes, bytearray)):
                if mime.startswith("text/") or mime == "image/svg+xml":
                    out[mime] = bytes(v).decode("utf-8", "replace")
                else:
                    out[mime] = base64.b64encode(bytes(v)).decode("ascii")
            elif isinstance(v, str):
                out[mime] = v
            else:
                out[mime] = str(v)
        return out

    def clean_metadata(md):
        if not isinstance(md, dict) or not md:
            return None
        try:
            json.dumps(md)
            return md
        except Exception:
            return None

    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    ansi = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")

    class Hook(DisplayHook):
        """Sends the value of a cell's last expression as an execute_result."""

        def start_displayhook(self):
            self._out = None

        def write_output_prompt(self):
            pass

        def write_format_data(self, format_dict, md_dict=None):
            self._out = (format_dict, md_dict)

        def finish_displayhook(self):
            out, self._out = getattr(self, "_out", None), None
            if out and out[0]:
                o = {"type": "execute_result", "execution_count": self.prompt_count,
                     "data": clean_bundle(out[0])}
                md = clean_metadata(out[1])
                if md:
                    o["metadata"] = md
                send({"t": "out", "o": o}, ack=True)

    class Publisher(DisplayPublisher):
        """Sends display() calls (and inline matplotlib figures) as display_data."""

        def publish(self, data, metadata=None, source=None, *, transient=None, update=False, **kwargs):
            # Display ids, their updates and clear_output only for a run that shows outputs
            # live: an update of an earlier output has no place in a static result.
            did = transient.get("display_id") if isinstance(transient, dict) and state["du"] else None
            if update:
                if did is None:
                    return
                o = {"type": "update_display_data", "data": clean_bundle(data)}
            else:
                o = {"type": "display_data", "data": clean_bundle(data)}
            if did is not None:
                o["display_id"] = str(did)[:256]
            md = clean_metadata(metadata)
            if md:
                o["metadata"] = md
            send({"t": "out", "o": o}, ack=True)

        def clear_output(self, wait=False):
            if state["du"]:
                send({"t": "out", "o": {"type": "clear_output", "wait": bool(wait)}}, ack=True)

    class Shell(InteractiveShell):
        # `!cmd` through a subprocess writing to fds 1 and 2, not through a pty (pexpect):
        # separate stdout and stderr, no "\r\n", no 100 ms start-up.
        system = InteractiveShell.system_raw

        def _showtraceback(self, etype, evalue, stb):
            try:
                evalue = str(evalue)
            except Exception:
                evalue = "<exception str() failed>"
            # The runner's own SIGINT handler is not the user's business.
            tb = [ansi.sub("", s) for s in (stb or []) if "in on_sigint(" not in s]
            send({"t": "out", "o": {"type": "error", "ename": str(getattr(etype, "__name__", etype)),
                                    "evalue": evalue, "traceback": tb}}, ack=True)

    cfg = Config()
    cfg.HistoryManager.hist_file = ":memory:"  # nothing lands in the workspace
    cfg.InteractiveShell.colors = "NoColor"
    cfg.InteractiveShell.autocall = 0
    cfg.InteractiveShell.autoindent = False
    shell = Shell.instance(config=cfg, displayhook_class=Hook, display_pub_class=Publisher)

    # input() and getpass() ask the cell's caller when it takes input (a Jupyter client that
    # allows stdin); otherwise they say that nobody can type here, as ipykernel does for a
    # client that takes no input, instead of an EOFError from an empty stdin.
    import builtins
    import getpass
    from IPython.core.error import StdinNotImplementedError

    def ask_input(prompt, password):
        if not state["stdin"] or threading.current_thread() is not main_thread:
            raise StdinNotImplementedError("input() cannot ask for a value here: nobody can type into this cell. "
                                           "Set the value in the code instead (e.g. name = 'value').")
        send({"t": "input", "prompt": str(prompt), "password": bool(password)})
        while True:
            line = pipes["r"].readline()
            if not line:
                os._exit(0)  # the guest is gone
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("op") != "input":
                continue  # an ack nobody waits for
            if "error" in msg:
                raise EOFError(str(msg["error"]))
            return str(msg.get("value", ""))

    builtins.input = lambda prompt="": ask_input(prompt, False)
    getpass.getpass = lambda prompt="Password: ", stream=None: ask_input(prompt, True)

    # Execution contexts: namespaces of this one kernel, each with its own working directory.
    # "" is the shell's own; a named one is made at its first cell, starting in the folder
    # the kernel started in (the workspace). Entering one makes its module the shell's user
    # module and sys.modules["__main__"] (so pickle finds what it defines), with its own
    # hidden names (%who); In, Out and the execution count stay the kernel's.
    where = {"ws": os.getcwd()}  # the workspace: where serve starts
    contexts = {}  # name -> [user_module, user_ns, user_ns_hidden, cwd], for those not entered
    current = {"name": ""}

    def enter(name):
        if name == current["name"]:
            return
        try:
            cwd = os.getcwd()
        except OSError:
            cwd = where["ws"]  # its folder was removed
        contexts[current["name"]] = [shell.user_module, shell.user_ns, shell.user_ns_hidden, cwd]
        ctx = contexts.pop(name, None)
        fresh = ctx is None
        if fresh:
            module, ns = shell.prepare_user_module(None, None)
            ctx = [module, ns, {}, where["ws"]]
        shell.user_module, shell.user_ns, shell.user_ns_hidden, cwd = ctx
        shell.ns_table["user_global"] = shell.user_module.__dict__
        shell.ns_table["user_local"] = shell.user_ns
        shell.Completer.namespace, shell.Completer.global_namespace = shell.user_ns, shell.user_module.__dict__
        if fresh:
            shell.init_user_ns()
        shell.init_sys_modules()
        current["name"] = name
        for d in (cwd, where["ws"]):
            try:
                os.chdir(d)
                break
            except OSError:
                pass

    def drop(name):
        if name == current["name"]:
            enter("")
        if name and contexts.pop(name, None) is not None:
            gc.collect()  # a namespace is a cycle (functions hold their globals)

    def restore_env(saved):
        # Earlier values back, variables that were not set removed again.
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def report_tools():
        # All the tools, when they changed since the last report.
        v = getattr(cellbox, "_version", None)
        if v == reported["v"]:
            return
        try:
            tools = cellbox._report()
        except Exception:
            return  # the module was tampered with: nothing to report
        reported["v"] = v
        # Within the guest's bounds whatever the module reports (user code can change it):
        # the first TOOLS_MAX tools that fit in TOOL_REPORT_MAX bytes as sent.
        kept, size = [], 0
        for t in tools if isinstance(tools, list) else []:
            try:
                size += len(encode(t)) + 1
            except Exception:
                continue
            if len(kept) >= TOOLS_MAX or size > TOOL_REPORT_MAX:
                break
            kept.append(t)
        send({"t": "tools", "tools": kept})

    def user_expressions(exprs):
        # Each expression's value as a display_data, or its error; a value shown in more
        # than UX_MAX bytes is an error instead (the whole answer is one line to the guest).
        out = {}
        try:
            got = shell.user_expressions({str(k): str(v) for k, v in exprs.items()})
        except Exception as e:  # IPython's own machinery
            got = {k: {"status": "error", "ename": type(e).__name__, "evalue": str(e), "traceback": []} for k in exprs}
        for k, v in got.items():
            if v.get("status") == "ok":
                o = {"type": "display_data", "data": clean_bundle(v.get("data"))}
                if len(encode(o)) > UX_MAX:
                    o = {"type": "error", "ename": "ValueError", "evalue": "the value is shown in more than %d KiB" % (UX_MAX >> 10),
                         "traceback": []}
            else:
                o = {"type": "error", "ename": str(v.get("ename", "")), "evalue": str(v.get("evalue", ""))[:1024],
                     "traceback": [ansi.sub("", str(l)) for l in (v.get("traceback") or [])][-50:]}
            out[k] = o
        return out

    def run(code, silent, quiet, ctx, env, du=False, ux=None, stdin=False, t0=None):
        # t0: when the cell's line was read (perf_counter_ns), to report its durations.
        n = shell.execution_count
        ran = 0
        ok, ename = True, ""
        answers = None
        signal.signal(signal.SIGINT, on_sigint)
        enter(ctx)
        saved = {}
        try:
            for k, v in env.items():
                saved[k] = os.environ.get(k)
                os.environ[k] = v
            try:
                state["armed"], state["du"], state["stdin"] = True, du, stdin
                send({"t": "started", "n": n})
                # A silent run (the pre-imports) is not silent to IPython: its events and
                # display hooks run as a cell's do (the guest drops what it outputs), so a
                # kernel has written what a user's first cell writes before one comes. A
                # quiet one (a tool's call) is a cell whose outputs are kept, uncounted.
                t1 = time.perf_counter_ns()
                r = shell.run_cell(code, store_history=not (silent or quiet))
                ran = time.perf_counter_ns() - t1
                if ux:
                    answers = user_expressions(ux)
            finally:
                state["armed"], state["du"], state["stdin"] = False, False, False
                state["pending"] = False
            err = r.error_before_exec if r.error_before_exec is not None else r.error_in_exec
            if err is not None:
                ok, ename = False, type(err).__name__
        except KeyboardInterrupt:
            # Interrupted outside the user's code (in IPython's own machinery).
            ok, ename = False, "KeyboardInterrupt"
            send({"t": "out", "o": {"type": "error", "ename": "KeyboardInterrupt", "evalue": "",
                                    "traceback": ["KeyboardInterrupt"]}}, ack=True)
        finally:
            restore_env(saved)
        shell.exit_now = False
        if not silent:
            report_tools()
        done = {"t": "done", "ok": ok, "ename": ename, "n": n}
        if answers is not None:
            done["ux"] = answers
        if t0 is not None:
            done["tr"] = {"runner": time.perf_counter_ns() - t0, "run_cell": ran}
        send(done)

    def ask(op, msg):
        # Jupyter's complete, inspect and is_complete, IPython's way (as ipykernel answers
        # them). Interruptible: the guest stops one that takes too long.
        code = str(msg.get("code") or "")
        pos = msg.get("pos")
        pos = len(code) if not isinstance(pos, int) or pos < 0 or pos > len(code) else pos
        if op != "is_complete":
            enter(str(msg.get("ctx") or ""))
        reply = None
        signal.signal(signal.SIGINT, on_sigint)
        alarm = signal.signal(signal.SIGALRM, on_sigint)
        state["armed"], state["asking"] = True, True
        try:
            send({"t": "started", "n": shell.execution_count})
            if op == "complete":
                from IPython.core.completer import provisionalcompleter, rectify_completions

                with provisionalcompleter():
                    comps = list(rectify_completions(code, shell.Completer.completions(code, pos)))[:COMPLETIONS_MAX]
                if comps:
                    reply = {"matches": [c.text for c in comps], "cursor_start": comps[0].start, "cursor_end": comps[0].end,
                             "types": [c.type or "" for c in comps]}
                else:
                    reply = {"matches": [], "cursor_start": pos, "cursor_end": pos}
            elif op == "inspect":
                from IPython.utils.tokenutil import token_at_cursor

                name = token_at_cursor(code, pos)
                try:
                    data = shell.object_inspect_mime(name, detail_level=1 if msg.get("detail") else 0)
                    reply = {"found": True, "data": clean_bundle({k: v for k, v in data.items() if k == "text/plain"})}
                except KeyError:
                    reply = {"found": False}
            else:
                status, indent = shell.input_transformer_manager.check_complete(code)
                reply = {"status": status}
                if status == "incomplete" and indent:
                    reply["indent"] = " " * int(indent)
        except KeyboardInterrupt:
            reply = None
        except Exception:
            reply = None  # the completer's or inspector's own failure: nothing to offer
        finally:
            state["armed"], state["pending"], state["asking"] = False, False, False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, alarm)
        send({"t": "done", "ok": reply is not None, "ename": "" if reply is not None else "no answer",
              "n": shell.execution_count, "reply": reply})

    def serve():
        for fd in (3, 4):
            os.set_inheritable(fd, False)  # user code's children must not hold the protocol
        rfile = pipes["r"] = io.open(3, "rb", buffering=1 << 16)
        where["ws"] = os.getcwd()
        while True:
            serve_one(rfile)

    def serve_one(rfile):
        line = rfile.readline()
        t0 = time.perf_counter_ns()
        if not line:
            os._exit(0)  # the guest is gone
        try:
            msg = json.loads(line)
        except ValueError:
            return
        op = msg.get("op")
        if op == "exec":
            ux = msg.get("ux")
            run(msg.get("code", ""), bool(msg.get("silent")), bool(msg.get("quiet")), str(msg.get("ctx") or ""),
                msg.get("env") or {}, bool(msg.get("du")), ux if isinstance(ux, dict) else None, bool(msg.get("stdin")),
                t0 if msg.get("tr") else None)
        elif op in ("complete", "inspect", "is_complete"):
            ask(op, msg)
        elif op == "drop":
            drop(str(msg.get("ctx") or ""))
            send({"t": "done", "ok": True, "ename": "", "n": shell.execution_count})
        elif op == "env":  # the whole environment, for a kernel that has run no cell
            env = msg.get("env") or []
            k = env_differs(env)
            if k:
                send({"t": "done", "ok": False, "ename": "environment: " + k, "n": shell.execution_count})
            else:
                apply_env(env)
                send({"t": "done", "ok": True, "ename": "", "n": shell.execution_count})
        elif op == "ping":  # the kernel is ready (one forked from a template that ran the pre-imports)
            send({"t": "done", "ok": True, "ename": "", "n": shell.execution_count})

    return shell, serve


if __name__ == "__main__":
    prepare()[1]()
