"""Where the shared data folder lives, and the manifest of its public files.

Lookup order (docs/NAMES.md): ``$GPUSCHED_DATA`` if set, else ``<repo root>/../shared/data`` (in a
checkout only), else the user cache ``~/.cache/gpusched/data`` (filled by ``gpusched-data download``).
An installed wheel has no repository root, so it uses the user cache by default. The manifest below holds
the facts of the data folder's MANIFEST.csv (origin, size, SHA-256, licence of every file), so the
download command needs nothing but this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

ENV_VAR = "GPUSCHED_DATA"
RAW_BASE_URL = "https://raw.githubusercontent.com"


class DataMissing(FileNotFoundError):
    """A data file is in none of the places the project looks; the message says how to get it."""


@dataclass(frozen=True)
class ManifestEntry:
    """One file of the data folder and where its original lives."""

    path: str
    repository: str
    commit: str
    source_path: str
    bytes: int
    sha256: str
    licence: str


def repo_root() -> Path:
    """The repository root: the parent of the ``gpusched_env`` package directory."""
    return Path(__file__).resolve().parent.parent


def in_checkout() -> bool:
    """True when the package runs from a source checkout (the repository root holds pyproject.toml);
    False for an installed wheel, whose parent folder is ``site-packages``."""
    return (repo_root() / "pyproject.toml").is_file()


def shared_dir() -> Path:
    """``<repo root>/../shared/data``."""
    return repo_root().parent / "shared" / "data"


def cache_dir() -> Path:
    """The user cache that ``gpusched-data download`` fills by default."""
    return Path.home() / ".cache" / "gpusched" / "data"


def default_download_dir() -> Path:
    """``$GPUSCHED_DATA`` if set, else the user cache."""
    env = os.environ.get(ENV_VAR)
    return Path(env).expanduser() if env else cache_dir()


def search_dirs() -> list[Path]:
    """Every folder :func:`data_path` looks in, in order."""
    dirs: list[Path] = []
    env = os.environ.get(ENV_VAR)
    if env:
        dirs.append(Path(env).expanduser())
    if in_checkout():
        dirs.append(shared_dir())
    dirs.append(cache_dir())
    return dirs


def _has_files(d: Path) -> bool:
    return d.is_dir() and any((d / e.path).is_file() for e in MANIFEST)


def data_dir() -> Path:
    """The data folder: ``$GPUSCHED_DATA`` if set; outside a checkout (an installed wheel) the user
    cache; in a checkout ``../shared/data`` if present, else the user cache if it holds any manifest
    file, else ``../shared/data`` (which then does not exist)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    if not in_checkout():
        return cache_dir()
    if shared_dir().is_dir():
        return shared_dir()
    if _has_files(cache_dir()):
        return cache_dir()
    return shared_dir()


def data_path(rel: str) -> Path:
    """Absolute path of data file ``rel`` (e.g. ``"traces/philly/philly.csv"``).

    Raises:
        DataMissing: the file is in none of :func:`search_dirs`.
    """
    looked = search_dirs()
    for d in looked:
        p = d / rel
        if p.is_file():
            return p
    places = "\n".join(f"  - {d / rel}" for d in looked)
    raise DataMissing(
        f"data file {rel!r} not found. Looked in:\n{places}\n"
        f"Get it with `gpusched-data download` (add `--only '{rel}'` for just this file), "
        f"or set {ENV_VAR} to a folder that holds it."
    )


def manifest_entry(rel: str) -> ManifestEntry:
    """The manifest entry of data file ``rel``; KeyError if it is not in the manifest."""
    for e in MANIFEST:
        if e.path == rel:
            return e
    raise KeyError(f"{rel!r} is not in the data manifest")


def source_url(entry: ManifestEntry, base_url: str = RAW_BASE_URL) -> str:
    """``<base_url>/<repository>/<commit>/<source_path>``, URL-encoded (spaces -> %20)."""
    return f"{base_url.rstrip('/')}/{entry.repository}/{entry.commit}/{quote(entry.source_path, safe='/')}"


# The facts of MANIFEST.csv in the shared data folder (one entry per file with a public origin; the
# project's own measurements, such as calibration/colocation-h100, have none and are not downloadable).
_FGD_LICENCE = "no licence file; cite FGD (ATC'23)"
_SIA_LICENCE = "Philly data CC-BY-4.0 (no licence file in the Sia repo)"
_ACME = ("InternLM/AcmeTrace", "6d6ac9cd15f3b01151ac6ba00ecddd9156f0dc73")
_HELIOS = ("S-Lab-System-Group/HeliosArtifact", "bdaae109c21f8038a2331e6a23a582d5ae78ab5b")
_ZEUS = ("ml-energy/zeus", "75a8b9398034eb9baf74ca0a830c2c31bcce52cd")
_ALIBABA = ("alibaba/clusterdata", "7a6c496e4f4b6ce6150be8f881cb051bf2abff42")
_GAVEL = ("stanford-futuredata/gavel", "c4fa40097339e9608ab71fd64c8bdea96a5e4a4c")
_PAL = ("hal-uw/blox-pal", "da726cabd3113ff50cb9860b040b479fa7114221")
_AZURE = ("Azure/AzurePublicDataset", "b469a113cedca53ddc3bdea71a143dc4b7d8700c")
_SIA = ("siasosp23/artifacts", "aaf7a0de7b6cb5eab06ea020467ede5d2fd18e70")

MANIFEST: tuple[ManifestEntry, ...] = (
    ManifestEntry(
        "calibration/cluster-summaries/acme_cluster_summary.csv",
        *_ACME,
        "data/cluster_summary.csv",
        1269,
        "cde7a7d4ba1596ea165cf4583137d2095020abebbc26b3cd834284c16e8e6ecf",
        "CC-BY-4.0",
    ),
    ManifestEntry(
        "calibration/cluster-summaries/helios_cluster_summary.csv",
        *_HELIOS,
        "analysis/1_compare with Philly trace/helios_cluster_summary.csv",
        1319,
        "9cfbef77bdcfab43e0ffbc886e9d8ca8ac0dd16528945c52d76693179a6122f6",
        "MIT (data CC-BY-4.0)",
    ),
    ManifestEntry(
        "calibration/power-zeus/summary_power_a40.csv",
        *_ZEUS,
        "examples/research_reproducibility/zeus_nsdi23/trace/summary_power_a40.csv",
        29641,
        "f4ec111fc9b06b353182faab9160ecb1236a486b2741ed93383b80497332031e",
        "Apache-2.0",
    ),
    ManifestEntry(
        "calibration/power-zeus/summary_power_p100.csv",
        *_ZEUS,
        "examples/research_reproducibility/zeus_nsdi23/trace/summary_power_p100.csv",
        18163,
        "158e9a6784b6e2d26710529b132cf173b227dc8688f4931c19a637bce2b7503b",
        "Apache-2.0",
    ),
    ManifestEntry(
        "calibration/power-zeus/summary_power_rtx6000.csv",
        *_ZEUS,
        "examples/research_reproducibility/zeus_nsdi23/trace/summary_power_rtx6000.csv",
        27704,
        "edccecc7f8b7a6102962b03f0f37767dd9cd2f03469ebccadc9805e82901bdc4",
        "Apache-2.0",
    ),
    ManifestEntry(
        "calibration/power-zeus/summary_power_v100.csv",
        *_ZEUS,
        "examples/research_reproducibility/zeus_nsdi23/trace/summary_power_v100.csv",
        32534,
        "f0b066dd1a451bd78f730e001ac3a7c411979bc7f0846f12c1a9fb604aa90628",
        "Apache-2.0",
    ),
    ManifestEntry(
        "calibration/power-zeus/summary_train.csv",
        *_ZEUS,
        "examples/research_reproducibility/zeus_nsdi23/trace/summary_train.csv",
        186977,
        "076b35615349ee624403006e5ad67fd9ebda92af690c7750f8bb0c2ab92c0cf4",
        "Apache-2.0",
    ),
    ManifestEntry(
        "calibration/stragglers/README.md",
        *_ALIBABA,
        "cluster-trace-gpu-v2020/mini-batch-time/README.md",
        2939,
        "e9f20b08c223c5718bec5349ddc4d2c7437e36404b2c516662f918be767077dd",
        "CC-BY-4.0",
    ),
    ManifestEntry(
        "calibration/stragglers/coefficient_variation.csv",
        *_ALIBABA,
        "cluster-trace-gpu-v2020/mini-batch-time/data/coefficient_variation.csv",
        1754084,
        "81a96c3e5cec9d5caff5df10cfd971ef79556319b0ce436e2eed6d08ae417fc4",
        "CC-BY-4.0",
    ),
    ManifestEntry(
        "calibration/stragglers/job_1_norm.csv",
        *_ALIBABA,
        "cluster-trace-gpu-v2020/mini-batch-time/data/job_1_norm.csv",
        54814,
        "6f555e44ababa68c25659f911eb28fa7658f7ff0b3c08161a57b3bce0bf0d2dd",
        "CC-BY-4.0",
    ),
    ManifestEntry(
        "calibration/stragglers/job_2_norm.csv",
        *_ALIBABA,
        "cluster-trace-gpu-v2020/mini-batch-time/data/job_2_norm.csv",
        43452,
        "c1945786e809ec0c204aa3f0e30d7dd3111234ef873707cb8304bdd290d433b2",
        "CC-BY-4.0",
    ),
    ManifestEntry(
        "calibration/stragglers/job_3_norm.csv",
        *_ALIBABA,
        "cluster-trace-gpu-v2020/mini-batch-time/data/job_3_norm.csv",
        45109,
        "47057a62829a1fbea6c90e43aeba53d4a9c2804c38ce31fd618d2426ef2b530b",
        "CC-BY-4.0",
    ),
    ManifestEntry(
        "calibration/stragglers/job_4_norm.csv",
        *_ALIBABA,
        "cluster-trace-gpu-v2020/mini-batch-time/data/job_4_norm.csv",
        425467,
        "eccd5b23e4480e585082ba4affecbcc240150a9dcfc69b237d4dcb28ad146bc6",
        "CC-BY-4.0",
    ),
    ManifestEntry(
        "calibration/throughput/gavel_simulation_throughputs.json",
        *_GAVEL,
        "scheduler/simulation_throughputs.json",
        1240176,
        "17111f7295f03265fd9e5118d7eba31e3dd9d6e50a2e215c13ad3d3f91f74381",
        "MIT",
    ),
    ManifestEntry(
        "calibration/variability/32gpu-variability.csv",
        *_PAL,
        "aggregated_data/32gpu-variability.csv",
        4825,
        "cc5cc95e745978ffe9f5b655d77e6fd6c96e39561073c6f037ad78ee38082238",
        "MIT",
    ),
    ManifestEntry(
        "calibration/variability/bert-longhorn-agg.csv",
        *_PAL,
        "aggregated_data/sim/bert-longhorn-agg.csv",
        276824,
        "70ab0041629083483015301827c4b33eae9daeb03b1525a02b2ffed29356a52d",
        "MIT",
    ),
    ManifestEntry(
        "calibration/variability/frontera-resnet-agg.csv",
        *_PAL,
        "aggregated_data/frontera/frontera-resnet-agg.csv",
        183525,
        "fe3703d99bab0586b272c1aa3976beda646522135053953905f8fb40b02f667a",
        "MIT",
    ),
    ManifestEntry(
        "calibration/variability/pagerank-longhorn-agg.csv",
        *_PAL,
        "aggregated_data/sim/pagerank-longhorn-agg.csv",
        124174,
        "3bae08e386d6d57d78ddb548d95bb1d112bf1ae2ccafe3886683798bde955709",
        "MIT",
    ),
    ManifestEntry(
        "calibration/variability/resnet-longhorn-agg.csv",
        *_PAL,
        "aggregated_data/sim/resnet-longhorn-agg.csv",
        334910,
        "050ac0c3049a8b328f601125aef4283aa5a49e9f889723c7bc0912c77ac5ea74",
        "MIT",
    ),
    ManifestEntry(
        "calibration/variability/sgemm-longhorn-agg.csv",
        *_PAL,
        "aggregated_data/sim/sgemm-longhorn-agg.csv",
        1854786,
        "e0ad9012e69610957a4cc8da177812ce17ccf51ecf1bfd5e8be28808cb354c5b",
        "MIT",
    ),
    ManifestEntry(
        "traces/alibaba-openb/openb_node_list_gpu_node.csv",
        *_ALIBABA,
        "cluster-trace-gpu-v2023/csv/openb_node_list_gpu_node.csv",
        42353,
        "2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5",
        _FGD_LICENCE,
    ),
    ManifestEntry(
        "traces/alibaba-openb/openb_pod_list_default.csv",
        *_ALIBABA,
        "cluster-trace-gpu-v2023/csv/openb_pod_list_default.csv",
        575468,
        "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8",
        _FGD_LICENCE,
    ),
    ManifestEntry(
        "traces/alibaba-openb/openb_pod_list_gpushare100.csv",
        *_ALIBABA,
        "cluster-trace-gpu-v2023/csv/openb_pod_list_gpushare100.csv",
        561220,
        "12dbc07d6a49bf8641e2275a2ff5bf7be74b5df7d148d531e135b140b95f9a3d",
        _FGD_LICENCE,
    ),
    ManifestEntry(
        "traces/alibaba-openb/openb_pod_list_multigpu50.csv",
        *_ALIBABA,
        "cluster-trace-gpu-v2023/csv/openb_pod_list_multigpu50.csv",
        297219,
        "206f2f5959db30ecb7c44e7f13197c8ec50b7a35558ad3777cc3662ef0fe5373",
        _FGD_LICENCE,
    ),
    ManifestEntry(
        "traces/azure-llm-2023/AzureLLMInferenceTrace_code.csv",
        *_AZURE,
        "data/AzureLLMInferenceTrace_code.csv",
        320117,
        "54e9a6d2a4bd06ba1e060304b900abbc74cbea53de96506e60fe5bb4f2277fb6",
        "CC-BY-4.0",
    ),
    ManifestEntry(
        "traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv",
        *_AZURE,
        "data/AzureLLMInferenceTrace_conv.csv",
        719188,
        "2f1e5b666d4e3055fdbba98598ce2ec307767b9064e03e2fa46676dbcc7d0bf8",
        "CC-BY-4.0",
    ),
    ManifestEntry(
        "traces/philly/pal-workloads/workload-1.csv",
        *_PAL,
        "workload-traces/philly/workload-1.csv",
        4030,
        "6ef7d9db14c49d79c98125d4c6961fe540b677da5027a7296a9636cf9dff0941",
        "MIT",
    ),
    ManifestEntry(
        "traces/philly/pal-workloads/workload-2.csv",
        *_PAL,
        "workload-traces/philly/workload-2.csv",
        4039,
        "d2d94d15d6356148ea9503c17c66a0b66ccee50e900500b9b84c40ae38355657",
        "MIT",
    ),
    ManifestEntry(
        "traces/philly/pal-workloads/workload-3.csv",
        *_PAL,
        "workload-traces/philly/workload-3.csv",
        3999,
        "97c89e28da7c24c7318af3dca3d023c1a670388f7473ac5fbf152950fe80d8d3",
        "MIT",
    ),
    ManifestEntry(
        "traces/philly/pal-workloads/workload-4.csv",
        *_PAL,
        "workload-traces/philly/workload-4.csv",
        4081,
        "99cfeac04649fc4227563c514f67bcdcdfd6c9c2003f4ae1fc58773981e1378b",
        "MIT",
    ),
    ManifestEntry(
        "traces/philly/pal-workloads/workload-5.csv",
        *_PAL,
        "workload-traces/philly/workload-5.csv",
        4038,
        "4057564c81019e6cf1b25455404b5cc47670ddaa91b633b86cf990d845e4c40d",
        "MIT",
    ),
    ManifestEntry(
        "traces/philly/pal-workloads/workload-6.csv",
        *_PAL,
        "workload-traces/philly/workload-6.csv",
        4049,
        "d6a4721518e9e64289acd7df5aa7a81068253e5dead04a456d86faf710d01559",
        "MIT",
    ),
    ManifestEntry(
        "traces/philly/pal-workloads/workload-7.csv",
        *_PAL,
        "workload-traces/philly/workload-7.csv",
        4070,
        "46aa9316820d02d2b17aee923ba168d53fc25217de82ee7732e1cececa1f96e5",
        "MIT",
    ),
    ManifestEntry(
        "traces/philly/pal-workloads/workload-8.csv",
        *_PAL,
        "workload-traces/philly/workload-8.csv",
        4055,
        "3a4a115326b8831279e79b9a69e6a5f28a1c759a96723abc2100ddf57957af01",
        "MIT",
    ),
    ManifestEntry(
        "traces/philly/philly.csv",
        *_SIA,
        "sia-simulator/traces/philly.csv",
        3444496,
        "ebffb3dd1589bdf4e7bcd74496201c5ded1d557d498ee14f560463f37ec353da",
        _SIA_LICENCE,
    ),
)
