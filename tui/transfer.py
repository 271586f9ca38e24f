"""Pull a job's outputs from a box: manifest, resumable download, hash check, load test.

Order per file (the teardown gate trusts only what this module recorded):
  manifest on the box -> path safety -> download to NAME.part, resuming from its size (U12)
  -> sha256 of the whole .part against the manifest -> rename to NAME only on a match. A
  mismatch re-takes the manifest for that file and re-fetches from zero once (a file that
  changed during the pull is fetched again, never mixed); a second mismatch is a failure and
  leaves no NAME. Then torch files are load-tested on the jump host when torch is there.
Verified pulls land in ``user_state_dir("gpuroom")/pulls.json``, written atomically, so the
gate survives restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import platformdirs

from .link import HostLink, PullIO

TORCH_SUFFIXES = (".pt", ".pth", ".ckpt")
LOAD_TEST_TIMEOUT_S = 600.0  # a multi-GB checkpoint loads in tens of seconds on a laptop
MANIFEST_TIMEOUT_S = 300.0
HASH_CHUNK = 1 << 20


@dataclass
class Progress:
    """What a progress callback sees: bytes, rate and ETA across the whole pull."""

    done: int
    total: int
    rate_bps: float
    eta_s: float | None
    path: str


@dataclass
class FileResult:
    path: str
    size: int
    sha256: str | None = None
    status: str = "pending"  # verified | failed | refused | skipped
    verified_by: str | None = None  # hash | load
    detail: str = ""
    bytes_transferred: int = 0


@dataclass
class PullResult:
    host: str
    job: str | None
    remote_dir: str
    local_dir: str
    files: list[FileResult] = field(default_factory=list)
    manifest_complete: bool = True
    manifest_reason: str | None = None
    bytes_transferred: int = 0
    load_tested: bool = False
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.manifest_complete and all(f.status == "verified" for f in self.files)

    @property
    def failures(self) -> list[FileResult]:
        return [f for f in self.files if f.status in ("failed", "refused")]


class PullError(Exception):
    """The pull could not start (no manifest); per-file problems are in PullResult."""


def safe_local_path(local_dir: Path, rel: str) -> Path | None:
    """Where a manifest path lands under local_dir, or None when it would escape it."""
    if not rel or "\x00" in rel or "\\" in rel:
        return None
    # Judge the raw components: PurePosixPath would quietly fold "a//b" and "./a".
    if rel.startswith("/") or any(part in ("", ".", "..") for part in rel.split("/")):
        return None
    p = PurePosixPath(rel)
    base = local_dir.resolve()
    target = (base / Path(*p.parts)).resolve()
    if target == base or base not in target.parents:
        return None  # e.g. a local symlinked subdir pointing elsewhere
    return target


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            h.update(chunk)
    return h.hexdigest()


async def take_manifest(link: HostLink, remote_dir: str,
                        only: list[str] | None = None) -> dict[str, Any]:
    args = ["manifest", remote_dir]
    for rel in only or []:
        args += ["--only", rel]
    result = await link.helper(*args, timeout_s=MANIFEST_TIMEOUT_S)
    try:
        doc = json.loads(result.stdout)
    except ValueError:
        err = result.stderr.decode(errors="replace").strip()[-400:]
        raise PullError(f"{link.name}: manifest of {remote_dir} failed "
                        f"(exit {result.rc}): {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
        raise PullError(f"{link.name}: manifest of {remote_dir}: unexpected answer")
    return doc


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


async def load_test(path: Path) -> tuple[bool, str]:
    """Load a checkpoint in a subprocess (weights_only): a crash or hang stays out of the TUI.

    weights_only because these bytes come from a rented box: a full unpickle would run
    whatever code the file holds, on the jump host.
    """
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuroom.remote.checkpoint", "verify", str(path), "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), LOAD_TEST_TIMEOUT_S)
    except (asyncio.TimeoutError, asyncio.CancelledError):
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    if proc.returncode == 0:
        return True, "torch.load(map_location='cpu', weights_only=True) OK"
    try:
        message = str(json.loads(out.splitlines()[-1]).get("error"))
    except (ValueError, IndexError, AttributeError):
        message = err.decode(errors="replace").strip()[-300:] or f"exit {proc.returncode}"
    return False, f"load test failed: {message}"


class _Meter:
    def __init__(self, total: int, cb: Callable[[Progress], None] | None) -> None:
        self.total = total
        self.done = 0
        self.cb = cb
        self.started = time.monotonic()

    def report(self, path: str, done_in_file_delta: int) -> None:
        self.done += done_in_file_delta
        if self.cb is None:
            return
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = self.done / elapsed
        left = max(self.total - self.done, 0)
        self.cb(Progress(self.done, self.total, rate, left / rate if rate > 0 else None, path))


async def _fetch_verified(io: PullIO, remote: str, part: Path, *, size: int, sha: str,
                          meter: _Meter, fr: FileResult) -> bool:
    """Resume (or start) the .part and check it against ``sha``; True on a match."""
    offset = part.stat().st_size if part.exists() else 0
    if offset > size:
        offset = 0  # longer than the file on the box: cannot be a prefix of it
    meter.report(fr.path, offset)
    last = 0

    def progress(written: int) -> None:
        nonlocal last
        meter.report(fr.path, written - last)
        last = written

    try:
        n = await io.fetch_file(remote, part, offset=offset, size=size, on_progress=progress)
    finally:
        fr.bytes_transferred += last
    fr.bytes_transferred += n - last
    return await asyncio.to_thread(sha256_file, part) == sha


async def _pull_file(link: HostLink, io: PullIO, remote_dir: str, entry: dict[str, Any], *,
                     target: Path, meter: _Meter) -> FileResult:
    rel = entry["path"]
    size, sha = int(entry["size"]), str(entry["sha256"])
    fr = FileResult(path=rel, size=size, sha256=sha)
    remote = remote_dir.rstrip("/") + "/" + rel
    part = target.with_name(target.name + ".part")
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and await asyncio.to_thread(sha256_file, target) == sha:
        fr.status, fr.verified_by, fr.detail = "verified", "hash", "already here"
        meter.report(rel, size)
        return fr
    if await _fetch_verified(io, remote, part, size=size, sha=sha, meter=meter, fr=fr):
        os.replace(part, target)
        fr.status, fr.verified_by = "verified", "hash"
        return fr
    # Mismatch: the .part may mix two versions of a file rewritten on the box. Ask the box
    # again what the file is now, and fetch it whole once.
    part.unlink(missing_ok=True)
    meter.report(rel, -size)
    doc = await take_manifest(link, remote_dir, only=[rel])
    again = [e for e in doc["files"] if e.get("path") == rel and e.get("kind") == "file"]
    if not again:
        fr.status, fr.detail = "failed", "hash mismatch, and the file is gone on the box"
        return fr
    size, sha = int(again[0]["size"]), str(again[0]["sha256"])
    fr.size, fr.sha256 = size, sha
    if await _fetch_verified(io, remote, part, size=size, sha=sha, meter=meter, fr=fr):
        os.replace(part, target)
        fr.status, fr.verified_by = "verified", "hash"
        fr.detail = "re-fetched: the file changed on the box during the pull"
        return fr
    part.unlink(missing_ok=True)
    fr.status = "failed"
    fr.detail = ("sha256 mismatch twice: the bytes received are not the bytes the box's "
                 "manifest lists; kept nothing. Check the box's disk, then pull again")
    return fr


async def pull(link: HostLink, remote_dir: str, local_dir: str | Path, *,
               on_progress: Callable[[Progress], None] | None = None, job: str | None = None,
               load_test_torch: bool | None = None,
               state_path: Path | None = None) -> PullResult:
    """Pull ``remote_dir`` into ``local_dir``; records the pull when everything verified."""
    local = Path(local_dir)
    local.mkdir(parents=True, exist_ok=True)
    doc = await take_manifest(link, remote_dir)
    box_dir = str(doc.get("dir") or remote_dir)
    result = PullResult(host=link.name, job=job, remote_dir=box_dir, local_dir=str(local),
                        manifest_complete=bool(doc.get("complete")),
                        manifest_reason=doc.get("reason"))
    todo: list[tuple[dict[str, Any], Path]] = []
    for entry in doc["files"]:
        rel = str(entry.get("path"))
        kind = entry.get("kind")
        if kind != "file":
            what = {"symlink": f"a symlink on the box (-> {entry.get('target')})"}.get(
                str(kind), f"not a regular file ({kind}: {entry.get('reason', '')})")
            result.files.append(FileResult(rel, 0, status="refused",
                                           detail=f"refused: {what}; never followed"))
            continue
        target = safe_local_path(local, rel)
        if target is None:
            result.files.append(FileResult(rel, int(entry.get("size") or 0), status="refused",
                                           detail="refused: path would land outside "
                                                  f"{local}"))
            continue
        todo.append((entry, target))
    meter = _Meter(sum(int(e["size"]) for e, _ in todo), on_progress)
    io = PullIO(link)
    for entry, target in todo:
        # A LinkError propagates: the link is gone, and the .part files stay for the resume.
        fr = await _pull_file(link, io, box_dir, entry, target=target, meter=meter)
        result.files.append(fr)
        result.bytes_transferred += fr.bytes_transferred
    do_load = torch_available() if load_test_torch is None else load_test_torch
    result.load_tested = do_load
    for fr in result.files:
        if fr.status != "verified" or not fr.path.endswith(TORCH_SUFFIXES):
            continue
        if not do_load:
            fr.detail = "hash-verified, not load-verified (no torch on this machine)"
            continue
        target = safe_local_path(local, fr.path)
        assert target is not None
        ok, detail = await load_test(target)
        if ok:
            fr.verified_by, fr.detail = "load", detail
        else:
            fr.status, fr.detail = "failed", detail
    if not do_load:
        result.note = "hash-verified, not load-verified: torch is not importable here"
    if result.ok and result.files:
        record_pull(result, state_path)
    return result


# -------------------------------------------------------------------------- pull records

def state_file(path: Path | None = None) -> Path:
    return path or Path(platformdirs.user_state_dir("gpuroom")) / "pulls.json"


def load_records(path: Path | None = None) -> list[dict[str, Any]]:
    p = state_file(path)
    try:
        doc = json.loads(p.read_text())
    except FileNotFoundError:
        return []
    except ValueError as exc:
        raise PullError(f"{p} is not valid JSON ({exc}); fix or move it: the teardown gate "
                        "reads it") from exc
    pulls = doc.get("pulls") if isinstance(doc, dict) else None
    return [r for r in pulls if isinstance(r, dict)] if isinstance(pulls, list) else []


def record_pull(result: PullResult, path: Path | None = None) -> None:
    """Add (or replace) the record for this host/job/dir; atomic: tmp, fsync, rename."""
    p = state_file(path)
    records = [r for r in load_records(p)
               if (r.get("host"), r.get("job"), r.get("dir")) !=
               (result.host, result.job, result.remote_dir)]
    files: list[dict[str, Any]] = [{"path": f.path, "size": f.size, "sha256": f.sha256,
              "verified_by": f.verified_by} for f in result.files if f.status == "verified"]
    torch_files = [f for f in files if str(f["path"]).endswith(TORCH_SUFFIXES)]
    by_load = bool(torch_files) and all(f["verified_by"] == "load" for f in torch_files)
    records.append({"host": result.host, "job": result.job, "dir": result.remote_dir,
                    "local_dir": result.local_dir, "files": files,
                    "verified_by": "load" if by_load else "hash", "time": time.time()})
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.tmp-{os.getpid()}")
    with open(tmp, "w") as f:
        json.dump({"version": 1, "pulls": records}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, p)
