"""``gpusched-data``: download, verify and list the public data files the project reads.

The file list (origins, sizes, SHA-256) is :data:`gpusched_env.data.MANIFEST`. Downloads are
verified before they land: each file is written to a temporary file beside its destination and moved
into place (:func:`gpusched_env.atomic.atomic_path`) only when its size and checksum match, so a failed or corrupt download
leaves nothing behind.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import http.client
import sys
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table

from gpusched_env import data as gdata
from gpusched_env.atomic import atomic_path
from gpusched_env.data import ManifestEntry

CHUNK = 1 << 16
TIMEOUT_S = 60.0


class DownloadError(RuntimeError):
    """A file could not be fetched or did not match the manifest."""


def file_status(path: Path, entry: ManifestEntry) -> str:
    """ "ok", "missing", "size mismatch (...)" or "sha256 mismatch" for a local copy of ``entry``."""
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    if size != entry.bytes:
        return f"size mismatch ({size} bytes, expected {entry.bytes})"
    if sha256_of(path) != entry.sha256:
        return "sha256 mismatch"
    return "ok"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def select(entries: Sequence[ManifestEntry], only: str | None) -> list[ManifestEntry]:
    """Entries whose path matches the glob ``only`` (all when None)."""
    return [e for e in entries if only is None or fnmatch.fnmatch(e.path, only)]


def fetch_one(entry: ManifestEntry, dest: Path, base_url: str, advance: Callable[[int], None]) -> None:
    """Download ``entry`` to ``dest / entry.path``, verified, atomically. Raises DownloadError."""
    url = gdata.source_url(entry, base_url)
    target = dest / entry.path
    try:
        with atomic_path(target, suffix=".part") as tmp:  # renamed into place only when verified
            h = hashlib.sha256()
            size = 0
            with open(tmp, "wb") as out, urllib.request.urlopen(url, timeout=TIMEOUT_S) as resp:
                for chunk in iter(lambda: resp.read(CHUNK), b""):
                    out.write(chunk)
                    h.update(chunk)
                    size += len(chunk)
                    advance(len(chunk))
            if size != entry.bytes:
                raise DownloadError(
                    f"{entry.path}: size mismatch: got {size} bytes, expected {entry.bytes} ({url})"
                )
            if h.hexdigest() != entry.sha256:
                raise DownloadError(
                    f"{entry.path}: checksum mismatch: sha256 {h.hexdigest()}, expected {entry.sha256} ({url}); "
                    "nothing was written"
                )
    except DownloadError:
        raise
    except (OSError, http.client.HTTPException) as exc:  # URLError, HTTPError, timeouts are OSErrors
        raise DownloadError(f"{entry.path}: download failed from {url}: {exc}") from exc


def download(
    entries: Sequence[ManifestEntry], dest: Path, *, base_url: str, force: bool, console: Console
) -> int:
    """Fetch every entry not already present with the right checksum. Returns the number of failures."""
    todo: list[ManifestEntry] = []
    for e in entries:
        if not force and file_status(dest / e.path, e) == "ok":
            console.print(f"[green]present[/green] {e.path}")
        else:
            todo.append(e)
    failures = 0
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=console,
        transient=False,
    ) as progress:
        overall = progress.add_task(f"{len(todo)} file(s)", total=sum(e.bytes for e in todo))
        for e in todo:
            try:
                fetch_one(e, dest, base_url, lambda n: progress.advance(overall, n))
                progress.console.print(f"[green]fetched[/green] {e.path}")
            except DownloadError as exc:
                failures += 1
                progress.console.print(f"[red]error[/red] {exc}")
    return failures


def verify(entries: Sequence[ManifestEntry], root: Path, console: Console) -> int:
    """Print a table of every entry's state under ``root``. Returns the number of problems."""
    table = Table(title=f"data files in {root}")
    table.add_column("file")
    table.add_column("bytes", justify="right")
    table.add_column("status")
    problems = 0
    for e in entries:
        status = file_status(root / e.path, e)
        problems += status != "ok"
        colour = "green" if status == "ok" else "red"
        table.add_row(e.path, str(e.bytes), f"[{colour}]{status}[/{colour}]")
    console.print(table)
    return problems


def list_entries(entries: Sequence[ManifestEntry], console: Console) -> None:
    table = Table(title="gpusched data manifest")
    for col in ("file", "bytes", "licence", "source"):
        table.add_column(col, overflow="fold")
    for e in entries:
        table.add_row(e.path, str(e.bytes), e.licence, gdata.source_url(e))
    console.print(table)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpusched-data",
        description="Fetch, check and list the public traces and calibration files gpusched reads. "
        f"Files are looked up in ${gdata.ENV_VAR}, then ../shared/data, then {gdata.cache_dir()}.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="{download,verify,list}")
    d = sub.add_parser("download", help="download the data files from their original repositories")
    d.add_argument(
        "--dest",
        type=Path,
        default=None,
        help=f"target folder (default: ${gdata.ENV_VAR} if set, else {gdata.cache_dir()})",
    )
    d.add_argument(
        "--only", metavar="GLOB", help="only files whose path matches GLOB, e.g. 'traces/philly/*'"
    )
    d.add_argument(
        "--base-url",
        default=gdata.RAW_BASE_URL,
        metavar="URL",
        help=f"replaces {gdata.RAW_BASE_URL} in the download URLs (mirrors, tests)",
    )
    d.add_argument("--force", action="store_true", help="download even files already present and valid")
    v = sub.add_parser("verify", help="check size and SHA-256 of every file; exit 1 on any problem")
    v.add_argument("--dir", type=Path, default=None, help="folder to check (default: the data folder in use)")
    v.add_argument("--only", metavar="GLOB", help="only files whose path matches GLOB")
    sub.add_parser("list", help="list the manifest: files, sizes, licences, source URLs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    entries = list(gdata.MANIFEST)
    if args.command == "list":
        list_entries(entries, console)
        return 0
    chosen = select(entries, args.only)
    if not chosen:
        console.print(f"[red]error[/red] no manifest file matches {args.only!r}")
        return 1
    if args.command == "download":
        dest = args.dest if args.dest is not None else gdata.default_download_dir()
        failures = download(chosen, dest, base_url=args.base_url, force=args.force, console=console)
        if failures:
            console.print(f"[red]{failures} file(s) failed[/red]; see the errors above")
            return 1
        console.print(f"all {len(chosen)} file(s) in {dest}")
        return 0
    root = args.dir if args.dir is not None else gdata.data_dir()
    return 1 if verify(chosen, root, console) else 0


if __name__ == "__main__":
    sys.exit(main())
