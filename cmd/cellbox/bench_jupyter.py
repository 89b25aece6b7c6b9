# The bench's reference for a cell over Jupyter's protocol (cellbox bench, bench_jupyter.go):
# a local ipykernel, no sandbox, driven by jupyter_client. Arguments: N WARM CODE. It
# starts a kernel (the python3 kernelspec), waits for it, runs CODE WARM times untimed, then
# N times, each timed from kc.execute to its execute_reply (get_shell_msg) and to its
# status idle on iopub; it prints one JSON line: {"reply_ns": [...], "idle_ns": [...]}.
# Without jupyter_client or ipykernel it exits 3, the missing module on stderr.
import json
import sys
import time

try:
    import ipykernel  # noqa: F401 (the kernel the kernelspec starts)
    from jupyter_client.manager import start_new_kernel
except ImportError as e:
    print(e, file=sys.stderr)
    sys.exit(3)

n, warm, code = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
try:
    reply, idle = [], []
    for i in range(-warm, n):
        t0 = time.perf_counter_ns()
        mid = kc.execute(code)
        while True:
            m = kc.get_shell_msg(timeout=60)
            if m["parent_header"].get("msg_id") == mid:
                break
        t1 = time.perf_counter_ns()
        if m["content"]["status"] != "ok":
            sys.exit("%r: %s" % (code, m["content"]))
        while True:
            m = kc.get_iopub_msg(timeout=60)
            if (m["parent_header"].get("msg_id") == mid and m["msg_type"] == "status"
                    and m["content"]["execution_state"] == "idle"):
                break
        t2 = time.perf_counter_ns()
        if i >= 0:
            reply.append(t1 - t0)
            idle.append(t2 - t0)
    print(json.dumps({"reply_ns": reply, "idle_ns": idle}))
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
    del kc  # now, not at the interpreter's exit, when its __del__ cannot log
