"""Checkpoints that move with a job when the nodes share no filesystem (``shared_fs=false``).

A node packs a job's checkpoint folder into one uncompressed tar (:func:`pack_dir`, stdlib only) when
the job stops there; the service keeps the bytes in its folder (:class:`CheckpointStore`, written
atomically, so a service that dies between the stop and the next launch loses nothing) and the
node of the next launch unpacks them into its own checkpoint folder (:func:`unpack_dir`) before the
job starts. A folder above the size limit is not packed: the job is not moved off its node.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpusched_env.atomic import atomic_path

MB = 1024 * 1024


def dir_bytes(path: str | Path) -> int:
    """Total size of the regular files under ``path`` (0 when it does not exist; links not followed)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            if os.path.isfile(p) and not os.path.islink(p):
                total += os.path.getsize(p)
    return total


def pack_dir(path: str | Path, max_bytes: int) -> tuple[int, bytes | None]:
    """(size of the folder's files, its tar) or (size, None) when the size is above ``max_bytes``
    (``max_bytes < 0``: the size only).
    Temporary files of an interrupted atomic save (``*.tmp``) are left out."""
    size = dir_bytes(path)
    if size > max_bytes:
        return size, None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:  # choice: uncompressed
        if Path(path).is_dir():
            for root, dirs, files in os.walk(path):
                dirs.sort()
                for f in sorted(files):
                    p = os.path.join(root, f)
                    if f.endswith(".tmp") or not os.path.isfile(p) or os.path.islink(p):
                        continue
                    tar.add(p, arcname=os.path.relpath(p, path), recursive=False)
    return size, buf.getvalue()


def unpack_dir(path: str | Path, data: bytes) -> None:
    """Replace the folder ``path`` by the tar ``data``: extracted beside it, then swapped in by
    renames, so a reader never sees a half-written folder. Members that would land outside the folder
    (absolute paths, ``..``, links, devices) are refused."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.in."))
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
            for m in tar.getmembers():
                name = os.path.normpath(m.name)
                if not (m.isfile() or m.isdir()) or name.startswith(("/", "..")):
                    raise ValueError(f"checkpoint archive: refusing member {m.name!r}")
                target = tmp / name
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True, mode=0o700)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                src = tar.extractfile(m)
                assert src is not None
                with open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
                os.chmod(target, 0o600)
        os.chmod(tmp, 0o700)
        old = dest.with_name(f".{dest.name}.old.{os.getpid()}")
        if dest.exists():
            os.replace(dest, old)
        os.replace(tmp, dest)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@dataclass(frozen=True)
class Held:
    """Where a stopped job's newest checkpoint is: on ``node`` (its folder there), ``size`` bytes,
    and whether a packed copy is in the service folder (False: above the limit, it stays there)."""

    node: str
    size: int
    packed: bool


class CheckpointStore:
    """The service folder's copies: ``moved/<id>.tar`` (the packed folder) and ``moved/<id>.json``
    (a :class:`Held`), each written atomically (temporary file, fsync, rename)."""

    def __init__(self, out_dir: str | Path) -> None:
        self.dir = Path(out_dir) / "moved"
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)

    def _write(self, path: Path, data: bytes) -> None:
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def put(self, job_id: int, node: str, size: int, data: bytes | None) -> None:
        """Record a stop on ``node``: the tar first, then the record that points at it."""
        if data is not None:
            self._write(self.dir / f"{job_id}.tar", data)
        else:
            (self.dir / f"{job_id}.tar").unlink(missing_ok=True)
        self._write(self.dir / f"{job_id}.json",
                    json.dumps({"node": node, "size": size, "packed": data is not None}).encode())

    def held(self, job_id: int) -> Held | None:
        try:
            d = json.loads((self.dir / f"{job_id}.json").read_text())
            return Held(str(d["node"]), int(d["size"]), bool(d["packed"]))
        except (OSError, ValueError, KeyError):
            return None

    def data(self, job_id: int) -> bytes:
        return (self.dir / f"{job_id}.tar").read_bytes()

    def moved_to(self, job_id: int, node: str) -> None:
        """The job now runs with its checkpoint on ``node`` (the packed copy stays until the next stop)."""
        h = self.held(job_id)
        if h is not None:
            self._write(self.dir / f"{job_id}.json",
                        json.dumps({"node": node, "size": h.size, "packed": h.packed}).encode())

    def drop(self, job_id: int) -> None:
        for suffix in (".json", ".tar"):
            (self.dir / f"{job_id}{suffix}").unlink(missing_ok=True)
