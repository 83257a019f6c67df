
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
