"""remote/manifest.py: what the box says a checkpoint dir holds, cached and bounded."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from gpuroom.remote import manifest

OLD_NS = 1_600_000_000 * 10**9  # well past the "still being written" window


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


def make(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.utime(path, ns=(OLD_NS, OLD_NS))


def test_lists_hashes_and_caches(home: Path, tmp_path: Path) -> None:
    d = tmp_path / "ckpt"
    make(d / "a.pt", b"a" * 1000)
    make(d / "sub" / "b b 'é'.bin", b"b")
    (d / "link").symlink_to("/etc/passwd")
    first = manifest.build(str(d))
    files = {f["path"]: f for f in first["files"]}
    assert first["complete"] is True and first["hashed"] == 2 and first["cache_hits"] == 0
    assert files["a.pt"]["sha256"] == hashlib.sha256(b"a" * 1000).hexdigest()
    assert files["sub/b b 'é'.bin"]["size"] == 1
    # A symlink is named with its target, never followed or hashed.
    assert files["link"] == {"path": "link", "kind": "symlink", "target": "/etc/passwd"}
    second = manifest.build(str(d))
    assert second["hashed"] == 0 and second["cache_hits"] == 2
    assert second["files"] == first["files"]
    assert Path(manifest.cache_path(str(d))).is_relative_to(home / ".gpuroom" / "cache")


def test_changed_file_is_rehashed(home: Path, tmp_path: Path) -> None:
    d = tmp_path / "ckpt"
    make(d / "a.pt", b"one")
    manifest.build(str(d))
    (d / "a.pt").write_bytes(b"two")  # same size, new mtime: the cache key no longer matches
    doc = manifest.build(str(d))
    assert doc["hashed"] == 1 and doc["files"][0]["sha256"] == hashlib.sha256(b"two").hexdigest()


def test_fresh_files_are_not_cached(home: Path, tmp_path: Path) -> None:
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "live.pt").write_bytes(b"x")  # mtime now: it may still change within this tick
    manifest.build(str(d))
    assert manifest.build(str(d))["hashed"] == 1


def test_bounded_by_count_and_time(home: Path, tmp_path: Path) -> None:
    d = tmp_path / "ckpt"
    for i in range(5):
        make(d / f"f{i}", b"x")
    cut = manifest.build(str(d), max_files=3)
    assert cut["complete"] is False and "3 files" in cut["reason"] and len(cut["files"]) == 3
    late = manifest.build(str(d), deadline_s=-1)
    assert late["complete"] is False and late["reason"] == "deadline"


def test_only_and_missing_dir(home: Path, tmp_path: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    d = tmp_path / "ckpt"
    make(d / "a", b"1")
    make(d / "b", b"2")
    assert manifest.main([str(d), "--only", "b", "--only", "gone"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sorted((f["path"], f["kind"]) for f in doc["files"]) == [("b", "file"),
                                                                 ("gone", "missing")]
    nodir = manifest.build(str(tmp_path / "nope"))
    assert nodir["complete"] is False and "not a directory" in nodir["reason"]


def test_defer_above_lists_big_uncached_files_without_reading_them(
        home: Path, tmp_path: Path) -> None:
    d = tmp_path / "ckpt"
    make(d / "big.bin", b"x" * 5000)
    make(d / "small.txt", b"s")
    first = manifest.build(str(d), defer_above=4096)
    files = {f["path"]: f for f in first["files"]}
    assert first["complete"] is True and first["hashed"] == 1 and first["deferred"] == 1
    assert files["big.bin"] == {"path": "big.bin", "kind": "file", "size": 5000,
                                "mtime_ns": OLD_NS, "sha256": None, "deferred": True}
    assert files["small.txt"]["sha256"] == hashlib.sha256(b"s").hexdigest()
    assert first["total_bytes"] == 5001
    # The pull asks for the big file on its own; that answer lands in the cache, so the
    # next deferring manifest has the digest at once and defers nothing.
    only = manifest.build(str(d), only=["big.bin"])
    assert only["files"][0]["sha256"] == hashlib.sha256(b"x" * 5000).hexdigest()
    again = manifest.build(str(d), defer_above=4096)
    assert again["deferred"] == 0 and again["cache_hits"] == 2
    assert again["files"][0] == only["files"][0]


@pytest.mark.parametrize("entry", [
    5,                                   # not a list: indexing it raised TypeError
    [3],                                 # too short: IndexError
    [3, OLD_NS, 123],                    # key matches, digest is not a string
    [3, OLD_NS, "0" * 63],               # key matches, digest is not a sha256
], ids=["int", "short", "int-digest", "short-digest"])
@pytest.mark.attack("bad answers", "a junk entry in the box's hash cache: rehashed, not trusted")
def test_junk_cache_entry_is_rehashed_not_trusted(home: Path, tmp_path: Path,
                                                  entry: object) -> None:
    """Regression: load_cache checked only the outer shape, so a junk entry crashed the
    manifest or was reported as the file's sha256 (found by mypy on remote/)."""
    d = tmp_path / "ckpt"
    make(d / "a.pt", b"one")
    cache = Path(manifest.cache_path(str(d)))
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({"schema": manifest.SCHEMA, "dir": str(d),
                                 "entries": {"a.pt": entry}}))
    doc = manifest.build(str(d))
    assert doc["hashed"] == 1 and doc["cache_hits"] == 0
    assert doc["files"][0]["sha256"] == hashlib.sha256(b"one").hexdigest()


def test_cache_of_another_schema_is_ignored(home: Path, tmp_path: Path) -> None:
    d = tmp_path / "ckpt"
    make(d / "a.pt", b"one")
    manifest.build(str(d))
    cache = Path(manifest.cache_path(str(d)))
    doc = json.loads(cache.read_text())
    assert manifest.build(str(d))["cache_hits"] == 1  # the cache as written is used
    doc["schema"] = manifest.SCHEMA + 1
    cache.write_text(json.dumps(doc))
    again = manifest.build(str(d))
    assert again["cache_hits"] == 0 and again["hashed"] == 1
