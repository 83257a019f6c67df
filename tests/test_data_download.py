"""gpusched-data against a local HTTP server, and the data-folder lookup."""

from __future__ import annotations

import functools
import hashlib
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpusched_env import data as gdata
from gpusched_env.cli import data as cli

REPO, COMMIT = "owner/repo", "0" * 40


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTP server on 127.0.0.1 (random port) serving ``tmp_path/www``; yields (base URL, root)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(root))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", root
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
        assert not thread.is_alive()


def _publish(
    root: Path, source_path: str, content: bytes, dest_rel: str, *, sha: str | None = None
) -> gdata.ManifestEntry:
    f = root / REPO / COMMIT / source_path
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(content)
    digest = sha or hashlib.sha256(content).hexdigest()
    return gdata.ManifestEntry(dest_rel, REPO, COMMIT, source_path, len(content), digest, "MIT")


@pytest.fixture()
def manifest(server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch) -> tuple[gdata.ManifestEntry, ...]:
    _, root = server
    entries = (
        _publish(root, "data/a.csv", b"x,y\n1,2\n", "traces/a.csv"),
        _publish(root, "dir with space/b.csv", b"b\n" * 1000, "calibration/b.csv"),
    )
    monkeypatch.setattr(gdata, "MANIFEST", entries)
    return entries


def test_download_success(
    server: tuple[str, Path], manifest: tuple[gdata.ManifestEntry, ...], tmp_path: Path
) -> None:
    url, _ = server
    dest = tmp_path / "dest"
    assert cli.main(["download", "--dest", str(dest), "--base-url", url]) == 0
    assert (dest / "traces/a.csv").read_bytes() == b"x,y\n1,2\n"
    assert (dest / "calibration/b.csv").read_bytes() == b"b\n" * 1000
    assert not list(dest.rglob("*.part"))
    assert cli.main(["verify", "--dir", str(dest)]) == 0


def test_download_only_glob(
    server: tuple[str, Path], manifest: tuple[gdata.ManifestEntry, ...], tmp_path: Path
) -> None:
    url, _ = server
    dest = tmp_path / "dest"
    assert cli.main(["download", "--dest", str(dest), "--base-url", url, "--only", "traces/*"]) == 0
    assert (dest / "traces/a.csv").is_file() and not (dest / "calibration/b.csv").exists()
    assert cli.main(["download", "--dest", str(dest), "--base-url", url, "--only", "nothing/*"]) == 1


def test_checksum_mismatch_leaves_no_file(
    server: tuple[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, root = server
    bad = _publish(root, "data/c.csv", b"tampered\n", "traces/c.csv", sha="f" * 64)
    monkeypatch.setattr(gdata, "MANIFEST", (bad,))
    dest = tmp_path / "dest"
    assert cli.main(["download", "--dest", str(dest), "--base-url", url]) == 1
    assert "checksum mismatch" in capsys.readouterr().out
    assert not (dest / "traces/c.csv").exists()
    assert [p for p in dest.rglob("*") if p.is_file()] == []


def test_size_mismatch_and_http_error(
    server: tuple[str, Path],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, root = server
    good = _publish(root, "data/d.csv", b"12345\n", "traces/d.csv")
    short = gdata.ManifestEntry(good.path, REPO, COMMIT, good.source_path, good.bytes + 1, good.sha256, "MIT")
    absent = gdata.ManifestEntry("traces/e.csv", REPO, COMMIT, "data/none.csv", 3, "0" * 64, "MIT")
    monkeypatch.setattr(gdata, "MANIFEST", (short, absent))
    dest = tmp_path / "dest"
    assert cli.main(["download", "--dest", str(dest), "--base-url", url]) == 1
    out = capsys.readouterr().out
    assert "size mismatch" in out and "download failed" in out
    assert [p for p in dest.rglob("*") if p.is_file()] == []


def test_skip_if_present(
    server: tuple[str, Path], manifest: tuple[gdata.ManifestEntry, ...], tmp_path: Path
) -> None:
    url, _ = server
    dest = tmp_path / "dest"
    assert cli.main(["download", "--dest", str(dest), "--base-url", url]) == 0
    target = dest / "traces/a.csv"
    mtime = target.stat().st_mtime_ns
    dead = "http://127.0.0.1:9"  # nothing listens: any fetch would fail
    assert cli.main(["download", "--dest", str(dest), "--base-url", dead]) == 0
    assert target.stat().st_mtime_ns == mtime
    # --force fetches again; a failed forced fetch keeps the good copy
    assert (
        cli.main(["download", "--dest", str(dest), "--base-url", dead, "--force", "--only", "traces/*"]) == 1
    )
    assert target.read_bytes() == b"x,y\n1,2\n"
    # a corrupt local copy is replaced
    target.write_bytes(b"corrupt")
    assert cli.main(["verify", "--dir", str(dest)]) == 1
    assert cli.main(["download", "--dest", str(dest), "--base-url", url]) == 0
    assert target.read_bytes() == b"x,y\n1,2\n"


def test_default_dest_is_env(
    server: tuple[str, Path],
    manifest: tuple[gdata.ManifestEntry, ...],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url, _ = server
    monkeypatch.setenv(gdata.ENV_VAR, str(tmp_path / "envdir"))
    assert cli.main(["download", "--base-url", url]) == 0
    assert (tmp_path / "envdir/traces/a.csv").is_file()
    assert gdata.data_path("traces/a.csv") == tmp_path / "envdir/traces/a.csv"


def test_list_runs(manifest: tuple[gdata.ManifestEntry, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["list"]) == 0
    assert "traces/a.csv" in capsys.readouterr().out


def test_data_missing_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(gdata.ENV_VAR, str(tmp_path / "env"))
    monkeypatch.setattr(gdata, "shared_dir", lambda: tmp_path / "shared")
    monkeypatch.setattr(gdata, "cache_dir", lambda: tmp_path / "cache")
    with pytest.raises(gdata.DataMissing) as info:
        gdata.data_path("traces/philly/philly.csv")
    assert isinstance(info.value, FileNotFoundError)
    msg = str(info.value)
    assert "traces/philly/philly.csv" in msg
    for d in ("env", "shared", "cache"):
        assert str(tmp_path / d / "traces/philly/philly.csv") in msg
    assert "gpusched-data download" in msg and gdata.ENV_VAR in msg


def test_data_dir_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(gdata.ENV_VAR, raising=False)
    monkeypatch.setattr(gdata, "shared_dir", lambda: tmp_path / "shared")
    monkeypatch.setattr(gdata, "cache_dir", lambda: tmp_path / "cache")
    assert gdata.data_dir() == tmp_path / "shared"  # neither exists: the documented default
    first = gdata.MANIFEST[0].path
    (tmp_path / "cache" / first).parent.mkdir(parents=True)
    (tmp_path / "cache" / first).write_text("x")
    assert gdata.data_dir() == tmp_path / "cache"
    assert gdata.data_path(first) == tmp_path / "cache" / first
    (tmp_path / "shared").mkdir()
    assert gdata.data_dir() == tmp_path / "shared"
    monkeypatch.setenv(gdata.ENV_VAR, str(tmp_path / "env"))
    assert gdata.data_dir() == tmp_path / "env"


def test_installed_wheel_defaults_to_the_user_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a checkout (no pyproject.toml at the package's parent, as in site-packages) the data
    folder is the user cache, never ``site-packages/../shared/data``."""
    monkeypatch.delenv(gdata.ENV_VAR, raising=False)
    site = tmp_path / "lib" / "python3.11" / "site-packages"
    (site.parent / "shared" / "data").mkdir(parents=True)  # even where such a folder happens to exist
    monkeypatch.setattr(gdata, "repo_root", lambda: site)
    monkeypatch.setattr(gdata, "cache_dir", lambda: tmp_path / "cache")
    assert not gdata.in_checkout()
    assert gdata.data_dir() == tmp_path / "cache"
    assert gdata.search_dirs() == [tmp_path / "cache"]
    with pytest.raises(gdata.DataMissing, match="gpusched-data download") as info:
        gdata.data_path("traces/philly/philly.csv")
    assert "shared" not in str(info.value)
    (site / "pyproject.toml").parent.mkdir(parents=True)
    (site / "pyproject.toml").write_text("")  # a checkout: its ../shared/data comes first
    assert gdata.in_checkout()
    assert gdata.data_dir() == site.parent / "shared" / "data"


def test_source_url_and_manifest_facts() -> None:
    e = gdata.manifest_entry("calibration/cluster-summaries/helios_cluster_summary.csv")
    assert gdata.source_url(e) == (
        "https://raw.githubusercontent.com/S-Lab-System-Group/HeliosArtifact/"
        "bdaae109c21f8038a2331e6a23a582d5ae78ab5b/analysis/1_compare%20with%20Philly%20trace/"
        "helios_cluster_summary.csv"
    )
    assert gdata.source_url(e, "http://h:1/").startswith("http://h:1/S-Lab-System-Group/")
    assert len(gdata.MANIFEST) == 35
    assert len({e.path for e in gdata.MANIFEST}) == 35
    assert all(len(e.sha256) == 64 and len(e.commit) == 40 and e.bytes > 0 for e in gdata.MANIFEST)


def test_manifest_matches_shared_csv() -> None:
    """The embedded manifest holds the same facts as MANIFEST.csv of the data folder (when present) for
    every file with a public origin; the project's own measurements (no repository, commit ``-``)
    cannot be downloaded and are left out of it."""
    import csv

    csv_path = gdata.shared_dir() / "MANIFEST.csv"
    if not csv_path.is_file():
        pytest.skip("shared data folder absent")
    with csv_path.open(newline="") as f:
        rows = {r["path"]: r for r in csv.DictReader(f) if r["commit"] != "-"}
    assert set(rows) == {e.path for e in gdata.MANIFEST}
    for e in gdata.MANIFEST:
        r = rows[e.path]
        assert (e.repository, e.commit, e.source_path, str(e.bytes), e.sha256, e.licence) == (
            r["repository"],
            r["commit"],
            r["source_path"],
            r["bytes"],
            r["sha256"],
            r["licence"],
        )
