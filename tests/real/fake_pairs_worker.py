"""A stand-in for ``python -m gpusched.real.pairs_worker SPEC.json`` that speaks its protocol in milliseconds
without torch (tests of the orchestration). ``FAKE_PAIRS_CRASH=hp|be``: that role exits 1 at start."""

import json
import os
import signal
import sys
import time

spec = json.load(open(sys.argv[1]))
role = spec["role"]
if os.environ.get("FAKE_PAIRS_CRASH") == role:
    print("fake worker: crashing as asked", file=sys.stderr)
    sys.exit(1)
stop = []
signal.signal(signal.SIGTERM, lambda s, f: stop.append(1))
out = open(spec["progress"], "a", buffering=1)
solo = spec["solo_ms"] if spec["solo_ms"] is not None else 2.0
out.write(json.dumps({"ev": "ready", "role": role, "solo_ms": solo}) + "\n")
while not os.path.exists(spec["go"]):
    time.sleep(0.005)
if role == "hp":
    out.write(json.dumps({"ev": "result", "role": role, "requests": 10, "dropped": 0, "solo_ms": solo,
                          "mean_ms": 3.5, "p50_ms": 3.0, "p99_ms": 9.25}) + "\n")
    sys.exit(0)
out.write(json.dumps({"ev": "result", "role": role, "iters": 5, "iter_per_s": 15.0 if "CUDA_MPS_PIPE_DIRECTORY" in os.environ else 20.0}) + "\n")
deadline = time.time() + 60
while not stop and time.time() < deadline:
    time.sleep(0.01)
