"""A stand-in for ``python -m gpusched.real.worker SPEC.json`` that speaks its protocol without torch, for
tests of the backend's own bookkeeping (realtest_helpers.FakeWorkers starts it): the same progress
records (ready, iter, ckpt, done, stopped), SIGUSR1 and SIGTERM handling, Ctrl-C ignored, a checkpoint
holding the iteration, the steady time per iteration after ``warmup_iters``, and the worker's exit codes (``FAKE_WORKER_EXITS=DONE,STOPPED``). The real
worker runs in test_worker.py, test_replay.py, test_kill.py, test_commands.py and test_profile.py."""

import json
import os
import signal
import sys
import time

ITER_S = 0.001  # choice: about a tiny pointnet step on the CPU stand-in; a 10**7-iteration job never ends
EXIT_DONE, EXIT_STOPPED = (int(x) for x in os.environ["FAKE_WORKER_EXITS"].split(","))

spec = json.load(open(sys.argv[1]))
flags = {"ckpt": False, "stop": False}
signal.signal(signal.SIGUSR1, lambda s, f: flags.update(ckpt=True))
signal.signal(signal.SIGTERM, lambda s, f: flags.update(stop=True))
signal.signal(signal.SIGINT, signal.SIG_IGN)
cores = os.environ.get("GPUSCHED_CPU_CORES")
if cores:
    os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
ckpt = spec["checkpoint"]
it = json.load(open(ckpt))["iteration"] if os.path.exists(ckpt) else 0
saved_at = it
out = open(spec["progress"], "a", buffering=1)


def emit(ev, **kw):  # type: ignore[no-untyped-def]
    out.write(json.dumps({"ev": ev, "job_id": spec["job_id"], "iter": it, "t": time.time(), **kw}) + "\n")


def save():  # type: ignore[no-untyped-def]
    global saved_at
    with open(ckpt + ".tmp", "w") as f:
        json.dump({"iteration": it}, f)
    os.replace(ckpt + ".tmp", ckpt)
    saved_at = it
    emit("ckpt")


emit("ready", threads=1, pid=os.getpid())
last = time.time()
start_it, warmup = it, spec.get("warmup_iters", 0)
t_warm = time.perf_counter() if warmup == 0 else None
while it < spec["total_iters"]:
    if flags["stop"]:
        if it > saved_at or not os.path.exists(ckpt):
            save()
        emit("stopped")
        out.close()
        sys.exit(EXIT_STOPPED)
    if flags["ckpt"]:
        flags["ckpt"] = False
        save()
    time.sleep(ITER_S)
    it += 1
    if it - start_it == warmup:
        t_warm = time.perf_counter()
    if time.time() - last >= spec["report_every_s"] or it == spec["total_iters"]:
        emit("iter", loss=1.0)
        last = time.time()
steady = None  # measured after the warm-up, as the worker does
if t_warm is not None and it - start_it > warmup:
    steady = (time.perf_counter() - t_warm) / (it - start_it - warmup)
save()
emit("done", loss=1.0, steady_iter_s=steady)
out.close()
sys.exit(EXIT_DONE)
