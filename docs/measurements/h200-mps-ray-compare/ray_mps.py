"""Service with the Ray engine (embedded one-machine Ray cluster, its GPU resource detected by Ray) on this
machine's GPU: a packing policy puts two jobs on GPU 0 as MPS clients (50 % each) through the node's Ray
agent; prints what each job saw, the Ray node's resources, the agent's own CUDA_VISIBLE_DEVICES, and the report."""
import json, os, sys, time
from pathlib import Path
import ray
from gpusched.real.service.queue import JobQueue
from gpusched.real.service.ray_engine import RayEngine
from gpusched.real.service.report import report
from gpusched.real.service.serve import ServeConfig, Service
from gpusched.real.service.spec import parse_spec
from gpusched_env.types import Sharing, Start
from tests.real.service.helpers import submit

out = Path(sys.argv[1])
JOB = Path(sys.argv[2]).read_text()  # the same job as service_mps.py
class MpsPacking:
    name, round_s, events = "mps_packing", None, True
    def decide(self, view):
        return [Start(j, (0,), Sharing.mps(50.0)) for j in view.pending_ids]

(out / "jobs").mkdir(parents=True, exist_ok=True)
(out / "job.py").write_text(JOB)
specs = [parse_spec({"command": [sys.executable, str(out / "job.py")], "gpus": 1,
                     "env": {"OUTD": str(out / "jobs")}}, "t") for _ in range(2)]
a, b = submit(out / "svc", specs)
t0 = time.time()
engine = RayEngine(out / "svc", address=None, embedded_devices=None, telemetry_s=0.25)
print(f"ray.init {time.time()-t0:.1f} s; nodes:", [(n["NodeID"][:12], n["Resources"]) for n in ray.nodes()])
print("engine nodes:", engine.nodes())
@ray.remote(num_cpus=0)
def actor_env():
    return {k: v for k, v in os.environ.items() if k.startswith("CUDA")}
print("a num_gpus=0 task's CUDA_* env:", ray.get(actor_env.remote()))
cfg = ServeConfig(out_dir=str(out / "svc"), engine="ray", poll_s=0.1, grace_s=5.0, exit_when_idle=True, max_wall_s=150.0)
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
for p in sorted((out / "svc" / "nodes").glob("*/telemetry.csv")):
    tel = p.read_text().splitlines(); print(p, len(tel), "telemetry lines:", *tel[:3], *tel[-3:], sep="\n")
import subprocess
print("ray initialized after the service:", ray.is_initialized())
time.sleep(1.0)
print("MPS processes after the service ended:", subprocess.run(["pgrep", "-fa", "nvidia-cuda-mps"], capture_output=True, text=True).stdout or "none")
print(subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout)
