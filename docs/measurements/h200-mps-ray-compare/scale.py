"""Write a one-GPU copy of real_cpu_small whose jobs last a quarter of their CPU-stand-in durations on this
GPU: work_iters = CPU iters x CPU base time (the CPU profile's models.json, this machine's CPU, 2026-11-27) / 4 /
this GPU's profiled base time."""
import json, re, sys
cpu = {"resnet50": 0.04154, "bert": 0.02445, "pointnet": 0.00962}  # gpusched-real profile, one CPU stand-in device
gpu = json.load(open(sys.argv[1]))
src = open("conf/scenario/real_cpu_small.yaml").read().replace("gpus_per_node: 2", "gpus_per_node: 1")
src = src.replace("name: real_cpu_small", "name: real_gpu1")
def f(m):
    iters, model = int(m.group(1)), m.group(2)
    return f"work_iters: {max(1, round(iters * cpu[model] / 4 / gpu[model]))}, model: {model}"
src = re.sub(r"work_iters: (\d+), model: (\w+)", f, src)
open(sys.argv[2], "w").write(src)
print(re.findall(r"work_iters: \d+, model: \w+", src))
