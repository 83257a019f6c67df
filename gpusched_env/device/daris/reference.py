"""DARIS's own measured throughput per configuration (the reference the stage model is checked against).

Median ``Throughput`` (jobs/s: HP jobs + admitted LP jobs) over the runs recorded in the DARIS
repository's result summaries, AmirFB/DARIS at commit d669f60 (``results/main/<taskset>/<contexts>/
<streams>/<oversubscription>/summary.csv``; taskset folders ``res``, ``unt``, ``inc``, and ``mix``,
whose three per-model summaries ``mix/.../{res,unt,inc}/summary.csv`` are summed). RTX 2080 Ti.
No model parameter is fitted on these figures: every configuration is held out.
"""

from __future__ import annotations

# (contexts, streams per context, oversubscription) -> median jobs/s, per taskset of daris_rt
THROUGHPUT: dict[str, dict[tuple[int, int, float], float]] = {
    "resnet": {(1, 1, 1.0): 377, (2, 1, 2.0): 690, (2, 2, 1.0): 954, (3, 1, 3.0): 908, (3, 3, 1.0): 603,
               (4, 2, 1.0): 585, (4, 4, 1.0): 480, (6, 1, 6.0): 1134, (6, 2, 1.0): 446},
    "unet": {(1, 1, 1.0): 186, (2, 1, 2.0): 236, (2, 2, 1.0): 240, (3, 1, 3.0): 250, (3, 3, 1.0): 260,
             (4, 2, 1.0): 253, (4, 4, 1.0): 144, (6, 1, 6.0): 266, (6, 2, 1.0): 168},
    "inception": {(1, 1, 1.0): 94, (2, 1, 2.0): 148, (2, 2, 1.0): 236, (3, 1, 3.0): 219, (3, 3, 1.0): 192,
                  (4, 2, 1.0): 192, (4, 4, 1.0): 192, (6, 1, 6.0): 309, (6, 2, 1.0): 192},
    "mix": {(1, 1, 1.0): 188, (2, 1, 2.0): 352, (2, 2, 1.0): 532, (3, 1, 3.0): 494, (3, 3, 1.0): 380,
            (4, 2, 1.0): 383, (4, 4, 1.0): 359, (6, 1, 6.0): 590, (6, 2, 1.0): 408},
}
