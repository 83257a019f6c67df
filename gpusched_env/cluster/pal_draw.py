"""PAL's artifact variability draw, rebuilt from the Longhorn data with the artifact's procedure.

The PAL artifact (``hal-uw/blox-pal``, branch ``artifact``, ``blox/cluster_state.py``) gives every
simulated GPU one factor per performance class as follows, and this module does the same:

1. ``ClusterState.__init__`` seeds Python's ``random`` with 42 (``random.seed(42)``);
2. GPUs are registered in id order 0, 1, ... (16 machines x 4 GPUs in A1/A2); for each GPU,
   ``_get_machine_slowdowns`` walks the classes in ``blox/profiles.json`` order (A, B, C, D) and,
   since a simulated GPU's uuid (its integer id) is never a uuid of the measurement files, takes
   ``random.choice`` over that class's per-run ``perf`` column normalised by its median;
3. the class files (``blox/profiles.json``): A = ResNet-50, B = BERT, C = BERT (again: an
   independent draw from the same data), D = PageRank, all Longhorn V100
   (``calibration/variability/*-longhorn-agg.csv``), rows in file order.

:func:`artifact_draw` repeats this with a private ``random.Random(seed)`` (no global RNG; Python's
``choice`` is ``seq[randbelow(len(seq))]`` on both). Without the data folder it falls back to
:data:`ARTIFACT_DRAW_64`, the 64 x 4 result of this very procedure for seed 42 (derived figures,
checked against the rebuild by ``tests/test_pal_draw.py``). :func:`draw_properties` summarises a
draw for the robustness study (largest class-A factor, spread).
"""

from __future__ import annotations

import csv
import functools
import random

import numpy as np

from gpusched_env.types import PERF_CLASSES

ARTIFACT_SEED = 42
"""``random.seed(42)`` in the artifact's ``ClusterState.__init__``."""

CLASS_FILES: dict[str, str] = {
    "A": "calibration/variability/resnet-longhorn-agg.csv",
    "B": "calibration/variability/bert-longhorn-agg.csv",
    "C": "calibration/variability/bert-longhorn-agg.csv",
    "D": "calibration/variability/pagerank-longhorn-agg.csv",
}
"""The artifact's ``blox/profiles.json`` (classes A-D -> Longhorn aggregate files)."""


def normalised_perf(rel: str) -> list[float]:
    """The file's ``perf`` column in file order divided by its median (the artifact's
    ``df['perf'] / df['perf'].median()``)."""
    from gpusched_env.data import data_path

    return list(_normalised_perf(str(data_path(rel))))


@functools.lru_cache(maxsize=8)
def _normalised_perf(path: str) -> tuple[float, ...]:
    """:func:`normalised_perf` of one data file, read once per process (a simulator of a
    ``pal_artifact`` scenario is built every run and every env reset)."""
    with open(path, newline="") as fh:
        vals = [float(row["perf"]) for row in csv.DictReader(fh)]
    med = float(np.median(vals))
    return tuple(v / med for v in vals)


def rebuild_artifact_draw(n_gpus: int = 64, seed: int = ARTIFACT_SEED) -> np.ndarray:
    """(n_gpus, 4) factors by the artifact's procedure (module docstring); needs the data folder."""
    pools = {rel: normalised_perf(rel) for rel in set(CLASS_FILES.values())}
    rng = random.Random(seed)
    out = np.empty((n_gpus, len(PERF_CLASSES)))
    for g in range(n_gpus):
        for c, cls in enumerate(PERF_CLASSES):
            out[g, c] = rng.choice(pools[CLASS_FILES[cls]])
    return out


def artifact_draw(n_gpus: int = 64, seed: int = ARTIFACT_SEED) -> np.ndarray:
    """The artifact's draw: rebuilt from the data when it is there, else the embedded 64-GPU table
    (seed 42 only; anything else needs the data)."""
    from gpusched_env.data import DataMissing

    try:
        return rebuild_artifact_draw(n_gpus, seed)
    except DataMissing:
        if seed != ARTIFACT_SEED or n_gpus > len(ARTIFACT_DRAW_64):
            raise
        return np.array(ARTIFACT_DRAW_64[:n_gpus], dtype=float)


def draw_properties(factors: np.ndarray) -> dict[str, float]:
    """What a draw looks like to the A1 workloads (nearly all GPU time is class A): the largest
    class-A factor, its spread (max / min) and how many class-A GPUs are >= 1.5x."""
    a = np.asarray(factors, dtype=float)[:, 0]
    return {
        "max_a": float(a.max()),
        "spread_a": float(a.max() / a.min()),
        "p90_a": float(np.quantile(a, 0.9)),
        "n_slow_a": float((a >= 1.5).sum()),
    }


ARTIFACT_DRAW_64: tuple[tuple[float, float, float, float], ...] = (
    (0.953385692537, 0.999223699805, 0.993355294984, 0.999400258603),
    (1.010180934346, 0.997003287612, 0.988160419682, 0.999109359243),
    (1.06256147555, 1.000035903462, 0.994234938038, 0.999597228638),
    (1.146449442741, 1.004160166505, 1.010564003007, 1.002053895447),
    (0.978300878829, 0.999304513468, 1.005569803441, 0.99998088672),
    (0.950150921065, 0.996149186978, 0.988436516564, 0.973006163082),
    (0.964705149001, 1.022210012539, 0.983798791203, 0.999137165704),
    (1.037174670197, 0.992358333808, 0.988659099917, 1.001900203538),
    (1.038588185591, 1.000193307335, 1.012250778281, 0.974227495066),
    (1.067910849627, 0.96974046996, 1.001387309445, 1.001038948963),
    (0.99951616742, 1.029494755837, 1.000796137249, 1.001215699803),
    (0.984507527152, 0.993244209129, 1.020775043121, 1.003308794245),
    (0.971334692489, 0.978942092594, 1.036338889312, 1.000373944356),
    (1.027141509262, 1.006682234466, 0.985533596928, 0.971214118597),
    (1.019428407256, 0.986824330918, 0.988594093327, 1.001568357552),
    (1.018562970811, 0.995977519691, 0.96974046996, 1.001900203538),
    (0.985514591748, 1.031200618975, 1.026632181286, 0.999875335459),
    (0.997908657494, 0.996031918252, 1.008376843298, 1.001020856221),
    (0.927660087429, 1.023113983666, 1.00209025494, 1.000157502961),
    (1.017047738064, 1.025494677114, 0.979604614791, 1.000958518723),
    (1.011112262277, 0.990189698012, 1.008638709698, 1.00009784842),
    (1.104529376099, 0.991770574128, 0.997676347858, 1.000553199616),
    (1.003899997504, 1.027177093094, 0.980220905415, 1.00022125599),
    (1.022391898134, 1.015657284931, 1.022069037319, 1.000268118189),
    (0.978688330158, 1.007262102958, 1.016912280116, 0.971353486385),
    (1.011997834076, 1.03639193357, 0.993017558748, 0.999728242384),
    (0.970366139042, 1.000218536906, 1.017623767193, 0.999545593336),
    (0.99258301446, 1.046271457366, 0.990189698012, 1.000861304712),
    (0.977904417855, 1.002181129146, 0.974245321227, 0.999679955343),
    (1.113738953875, 0.991053990916, 1.008584891552, 0.999855488085),
    (1.037023767787, 0.994234938038, 1.011888631643, 0.999242189894),
    (0.994540487287, 0.995459496373, 1.006451377098, 0.999172227778),
    (0.971141153161, 0.991581864839, 1.000264097502, 0.999029805592),
    (0.973927601831, 1.008376843298, 0.988659099917, 0.998850790324),
    (1.006923721719, 1.021655954033, 1.001148243925, 1.00052974944),
    (2.82785974679, 0.999964096538, 0.987131181614, 0.999549211567),
    (1.031834461471, 1.006379767763, 0.990895315067, 0.999678328103),
    (1.006295961568, 1.006379767763, 1.005569803441, 1.001530943598),
    (0.995592712421, 0.996816714749, 1.015970153841, 0.999815948041),
    (0.963614881536, 0.982793642456, 0.992555164803, 1.000756057957),
    (1.057494677095, 1.035749050838, 0.987185600757, 1.001083732342),
    (1.101063458602, 1.026650087736, 0.990594544331, 1.001250069473),
    (0.980489813346, 1.006640757364, 1.005974851465, 1.001852987762),
    (1.049143255046, 0.989830795117, 1.001204684234, 0.998315642215),
    (1.034838565097, 1.03042643874, 1.004215812343, 0.99995440157),
    (0.989450306637, 1.021614299925, 0.997173868163, 0.999942965302),
    (1.004242290848, 0.99299541238, 0.983016678615, 1.000099015086),
    (0.976613065729, 1.012124762151, 1.002907159554, 0.99982663861),
    (1.019923571875, 1.009782170337, 0.995038649509, 1.000574383351),
    (0.964879487209, 0.992698367009, 0.988436516564, 0.970090305553),
    (1.085581667744, 0.972132121332, 0.991384638667, 1.000904500201),
    (1.143891062572, 1.013745407052, 1.02346676132, 0.970547330803),
    (1.017699699777, 1.023381979423, 0.99953210651, 1.001580237422),
    (0.973310882303, 0.977218553524, 1.003462568247, 1.003213081249),
    (0.98204828286, 0.971329261961, 1.028643701357, 1.001098153029),
    (1.064618125945, 0.995351979459, 0.990054156474, 1.003573824522),
    (0.991351808883, 0.995467309348, 0.985611220361, 0.972823155371),
    (0.949062433577, 1.012030520709, 0.976548428289, 1.001827167734),
    (1.000296997095, 0.984201542261, 1.016915758495, 1.001046171661),
    (1.027540996707, 1.025566368778, 1.040077595606, 1.002626662164),
    (1.030319101947, 1.023381979423, 0.980944128421, 0.999124043662),
    (1.08190783922, 1.008341968942, 1.012762149456, 1.000900014314),
    (0.949677474379, 1.006674450306, 1.004160166505, 1.001167532584),
    (1.017860597967, 0.998693718272, 0.968411461447, 0.999741222105),)
"""``rebuild_artifact_draw(64, 42)`` from the data files of ``CLASS_FILES`` (MANIFEST.csv
commits), rounded to 12 decimals: the fall-back when the data folder is absent."""
