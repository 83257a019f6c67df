"""Plots of the pipeline level: one iteration's timeline per schedule, iteration time per case."""

from __future__ import annotations

from pathlib import Path

from gpusched_env.pipeline.execute import Timeline

KIND_COLOURS = ("#4C72B0", "#DD8452", "#55A868")  # F, B, W


def timelines(panels: list[tuple[str, Timeline, int]], title: str, path: Path) -> Path:
    """One row per (label, timeline, stages): stages down, time across, F/B/W coloured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(len(panels), 1, figsize=(12, 1.6 + 1.0 * len(panels) * 1.6), squeeze=False)
    end = max((op[4] for _, tl, _ in panels for op in tl), default=1.0)
    for ax, (label, tl, stages) in zip(axes[:, 0], panels, strict=True):
        bars: dict[tuple[int, int], list[tuple[float, float]]] = {}
        for s, kind, _mb, start, stop in tl:
            if stop > start:
                bars.setdefault((s, kind), []).append((start, stop - start))
        for (s, kind), spans in bars.items():  # one collection per stage and kind, not per operation
            ax.broken_barh(spans, (s - 0.4, 0.8), color=KIND_COLOURS[kind], lw=0)
        ax.set_ylim(stages - 0.5, -0.5)
        ax.set_xlim(0, end)
        ax.set_yticks(range(stages))
        ax.set_ylabel("stage")
        ax.set_title(label, fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("time in iteration (ms)")
    handles = [Patch(color=c, label=k) for c, k in zip(KIND_COLOURS, ("F", "B", "W"), strict=True)]
    fig.legend(handles=handles, loc="upper right", ncol=3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def iteration_bars(table: dict[str, dict[str, float]], path: Path) -> Path:
    """Mean iteration time (ms) per workload (groups) and policy (bars)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    workloads = list(table)
    policies = list(dict.fromkeys(p for w in workloads for p in table[w]))
    x = np.arange(len(workloads))
    width = 0.8 / max(len(policies), 1)
    fig, ax = plt.subplots(figsize=(10, 4))
    for k, p in enumerate(policies):
        ax.bar(x + k * width, [table[w].get(p, np.nan) for w in workloads], width, label=p)
    ax.set_xticks(x + 0.4 - width / 2, workloads)
    ax.set_ylabel("iteration time (ms)")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
