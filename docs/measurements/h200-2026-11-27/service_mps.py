"""Service on this machine's GPU: two jobs co-located as MPS clients (50 % each) by a packing policy,
real MPS daemon and NVML telemetry; prints what each job saw and the report."""
import json, sys, time
from pathlib import Path
from gpusched.real.service.engine import LocalEngine
from gpusched.real.service.queue import JobQueue
from gpusched.real.service.report import report
from gpusched.real.service.serve import ServeConfig, Service
from gpusched.real.service.spec import parse_spec
from gpusched_env.types import Sharing, Start
from tests.real.service.helpers import submit

out = Path(sys.argv[1])
JOB = r'''
import os, subprocess, time, torch
d = os.environ["OUTD"]; j = os.environ["GPUSCHED_JOB_ID"]
open(f"{d}/env{j}", "w").write("\n".join(sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith(("CUDA_", "GPUSCHED_SM")))) + "\n")
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); torch.cuda.synchronize()
sl = subprocess.run(["nvidia-cuda-mps-control"], input="get_server_list\n", capture_output=True, text=True)
smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout
t = time.time(); n = 0
while time.time() - t < 8.0:
    y = x @ x; n += 1
    if n % 20 == 0: torch.cuda.synchronize()
torch.cuda.synchronize(); dt = time.time() - t
open(f"{d}/run{j}", "w").write(f"matmuls/s {n/dt:.1f} TFLOP/s {n*2*8192**3/dt/1e12:.1f}\nserver_list rc={sl.returncode} out={sl.stdout.strip()!r} err={sl.stderr.strip()!r}\n{smi}\n")
'''
class MpsPacking:
    name, round_s, events = "mps_packing", None, True
    def decide(self, view):
        return [Start(j, (0,), Sharing.mps(50.0)) for j in view.pending_ids]

(out / "jobs").mkdir(parents=True, exist_ok=True)
(out / "job.py").write_text(JOB)
specs = [parse_spec({"command": [sys.executable, str(out / "job.py")], "gpus": 1,
                     "env": {"OUTD": str(out / "jobs")}}, "t") for _ in range(2)]
a, b = submit(out / "svc", specs)
engine = LocalEngine(out / "svc", 1, 1, "nvidia", telemetry_s=0.25)
cfg = ServeConfig(out_dir=str(out / "svc"), device_kind="nvidia", devices_per_node=1, poll_s=0.1, grace_s=5.0,
                  exit_when_idle=True, max_wall_s=120.0)
svc = Service(cfg, engine=engine)
svc.policy = MpsPacking()
t0 = time.time(); svc.run(); print(f"service ran {time.time()-t0:.1f} s")
q = JobQueue(out / "svc")
for j in (a, b):
    r = q.get(j); print("job", j, r.state, r.gpu_ids, r.first_start_t, r.finish_t)
q.close()
for f in sorted((out / "jobs").iterdir()):
    print("==", f.name); print(f.read_text()[:3000])
print(json.dumps(report(out / "svc"), indent=1)[:3000])
p = out / "svc" / "nodes" / "local0" / "telemetry.csv"; tel = p.read_text().splitlines() if p.exists() else ["(none)"]
print(len(tel), "telemetry lines:", *tel[:3], *tel[-3:], sep="\n")
