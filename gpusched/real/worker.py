"""A real job: one OS process training a catalogue model on synthetic tensors.

Run as ``python -m gpusched.real.worker SPEC.json``. Placement comes from the environment the backend sets:
``GPUSCHED_CPU_CORES`` (CPU stand-in: cores to pin to), ``GPUSCHED_NUM_THREADS`` (torch threads =
the SM share on CPU), ``GPUSCHED_NICE`` (CPU stand-in: scheduling priority, so that other load on
the machine does not eat into a "device"), ``GPUSCHED_TORCH_DEVICE`` ("cpu" or "cuda"; CUDA_VISIBLE_DEVICES and the MPS
variables are read by CUDA itself; ``GPUSCHED_CPU_FALLBACK=1`` lets a dry run without a GPU train
on the CPU instead).

Progress goes to a JSON-lines file (one object per line, ``ev`` = ready | iter | ckpt | done |
stopped, with ``iter``, ``loss``, ``t`` = wall clock). SIGUSR1 saves a checkpoint
{iteration, model, optimizer} atomically; SIGTERM saves one and exits with :data:`EXIT_STOPPED`. A
checkpoint present at start is resumed from.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from gpusched_env.atomic import atomic_path

EXIT_DONE = 0
EXIT_STOPPED = 3

S = TypeVar("S", bound="JsonSpec")


class JsonSpec:
    """A dataclass handed to a worker process as a JSON file (written atomically)."""

    def write(self, path: Path) -> None:
        with atomic_path(path) as tmp:
            tmp.write_text(json.dumps(asdict(self)))  # type: ignore[call-overload]

    @classmethod
    def read(cls: type[S], path: Path) -> S:
        return cls(**json.loads(Path(path).read_text()))


def spec_entry(argv: list[str] | None, module: str, spec_cls: type[S], run: Callable[[S], int]) -> int:
    """``python -m MODULE SPEC.json``: read the spec and run it (2 and a usage line on bad arguments)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: python -m {module} SPEC.json", file=sys.stderr)
        return 2
    return run(spec_cls.read(Path(args[0])))


def exit_now(code: int) -> None:
    """Flush and leave without interpreter teardown (torch's takes ~0.5 s): the exit is the signal."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@dataclass
class WorkerSpec(JsonSpec):
    """What one job process runs (written by the backend as JSON)."""

    job_id: int
    model: str  # catalogue name (for logs); the architecture is size["arch"]
    size: dict[str, Any]
    total_iters: int
    seed: int
    checkpoint: str
    progress: str
    lr: float = 0.01
    warmup_iters: int = 0
    report_every_s: float = 0.2
    extra: dict[str, Any] = field(default_factory=dict)


class _Flags:
    ckpt = False
    stop = False


def _install_handlers() -> None:
    def on_usr1(signum: int, frame: object) -> None:
        _Flags.ckpt = True

    def on_term(signum: int, frame: object) -> None:
        _Flags.stop = True

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the backend decides when a job stops


def _apply_placement() -> int:
    cores = os.environ.get("GPUSCHED_CPU_CORES")
    if cores:
        os.sched_setaffinity(0, {int(c) for c in cores.split(",")})
    nice = os.environ.get("GPUSCHED_NICE")
    if nice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, int(nice))
        except PermissionError:
            print(f"warning: cannot set nice {nice} (needs CAP_SYS_NICE); running at default priority",
                  file=sys.stderr)
    return int(os.environ.get("GPUSCHED_NUM_THREADS", "0") or 0)


def run(spec: WorkerSpec) -> int:
    """Train until ``spec.total_iters`` or a stop request; return the exit code."""
    threads = _apply_placement()
    import torch

    from gpusched.real.nets import ModelSize, build, synthetic_batch

    if threads > 0:
        torch.set_num_threads(threads)
    dev_name = os.environ.get("GPUSCHED_TORCH_DEVICE", "cpu")
    if dev_name == "cuda" and not torch.cuda.is_available():
        if os.environ.get("GPUSCHED_CPU_FALLBACK") != "1":  # test aid for dry runs without a GPU
            raise RuntimeError("GPUSCHED_TORCH_DEVICE=cuda but torch sees no CUDA device")
        dev_name = "cpu"
    dev = torch.device(dev_name)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize()

    size = ModelSize(**spec.size)
    torch.manual_seed(spec.seed)
    model = build(size).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=spec.lr, momentum=0.9)
    gen = torch.Generator().manual_seed(spec.seed)
    batches = [synthetic_batch(size, gen, dev) for _ in range(4)]
    ckpt_path = Path(spec.checkpoint)
    it = 0
    if ckpt_path.exists():
        state = torch.load(ckpt_path, map_location=dev, weights_only=True)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        it = int(state["iteration"])
    saved_at = it
    out = open(spec.progress, "a", buffering=1)

    def emit(ev: str, **kw: Any) -> None:
        out.write(json.dumps({"ev": ev, "job_id": spec.job_id, "iter": it, "t": time.time(), **kw}) + "\n")

    def save() -> None:
        nonlocal saved_at
        with atomic_path(ckpt_path) as tmp:
            torch.save({"iteration": it, "model": model.state_dict(), "optimizer": opt.state_dict()}, tmp)
        saved_at = it
        emit("ckpt")

    loss_fn = torch.nn.CrossEntropyLoss()
    emit("ready", threads=torch.get_num_threads(), pid=os.getpid())
    last_report = time.time()
    t_warm = time.perf_counter() if spec.warmup_iters == 0 else None
    start_it = it
    loss_v = float("nan")
    while it < spec.total_iters:
        if _Flags.stop:
            if it > saved_at or not ckpt_path.exists():
                save()
            emit("stopped")
            out.close()
            return EXIT_STOPPED
        if _Flags.ckpt:
            _Flags.ckpt = False
            save()
        x, y = batches[it % len(batches)]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        it += 1
        if it - start_it == spec.warmup_iters:
            sync()
            t_warm = time.perf_counter()
        now = time.time()
        if now - last_report >= spec.report_every_s or it == spec.total_iters:
            loss_v = float(loss.detach())
            emit("iter", loss=loss_v)
            last_report = now
    sync()
    steady = None
    if t_warm is not None and it - start_it > spec.warmup_iters:
        steady = (time.perf_counter() - t_warm) / (it - start_it - spec.warmup_iters)
    save()  # a stop request racing the last iteration then resumes straight to "done"
    emit("done", loss=loss_v, steady_iter_s=steady)
    out.close()
    return EXIT_DONE


def main(argv: list[str] | None = None) -> int:
    _install_handlers()
    return spec_entry(argv, "gpusched.real.worker", WorkerSpec, run)


if __name__ == "__main__":
    exit_now(main())
