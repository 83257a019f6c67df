# Which CUDA_MPS_PINNED_DEVICE_MEM_LIMIT lets a PyTorch MPS client run a small conv net (fwd+bwd)?
M=nvidia-cuda-mps-control; d=/tmp/mm; rm -rf $d; mkdir -p $d/pipe $d/log
export CUDA_MPS_PIPE_DIRECTORY=$d/pipe CUDA_MPS_LOG_DIRECTORY=$d/log
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
$M -d; sleep 1
cat > $d/client.py <<'PY'
import sys, torch
try:
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.LazyLinear(10)).cuda()
    x = torch.randn(16, 3, 32, 32, device="cuda"); net(x).sum().backward(); torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    print(sys.argv[1], "ok", "reserved_mb", torch.cuda.memory_reserved() >> 20, "mem_get_info_total_mb", total >> 20, "free_mb", free >> 20)
except Exception as e:
    print(sys.argv[1], "FAIL", type(e).__name__, str(e).splitlines()[0][:100])
PY
for L in 64M 128M 256M 384M 512M 640M 768M 1024M 1536M 2048M 4096M none; do
  if [ $L = none ]; then CUDA_VISIBLE_DEVICES=$UUID python3 $d/client.py "limit=none dev=uuid" > $d/out_$L 2>&1 &
  else CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=$L CUDA_VISIBLE_DEVICES=$UUID python3 $d/client.py "limit=$L dev=uuid" > $d/out_$L 2>&1 & fi
done
CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=512M CUDA_VISIBLE_DEVICES=0 python3 $d/client.py "limit=512M dev=index0" > $d/out_idx 2>&1 &
wait
cat $d/out_*
nvidia-smi --query-gpu=memory.used --format=csv
echo quit | $M; sleep 1; pkill -9 -f nvidia-cuda-mps; true
