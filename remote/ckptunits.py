"""A job's checkpoints as its own program writes them: declared (``queue add --ckpt``) or
discovered under its cwd, each a *unit*, a file or a directory.

Few programs write gpuroom's ``ckpt-<step>.pt`` into ``$GPUROOM_CKPT_DIR``: nanoGPT overwrites
``out/ckpt.pt``, HF's Trainer writes ``checkpoint-N/`` directories, Lightning
``checkpoints/epoch=0-step=5.ckpt`` and ``last.ckpt``. Without ``--ckpt`` the units are found
by name under the cwd, written since the job started; the walk is bounded (depth, entries,
time) and a cut walk says so. A unit still being written (modified within ``FRESH_S``, or
its size changing between two stats) is listed as writing, never as a checkpoint: a copy of it
would be half a file. The step is read from the name or is None, never guessed.

Standard library only (py3.8+): this runs on the box.
"""

from __future__ import annotations

import glob
import os
import re
import stat
import time
from typing import Any, Dict, List, Optional, Tuple

UNIT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors")
UNIT_DIR = re.compile(r"^checkpoint-\d+$")
# Trackers' and trainers' side files: never a checkpoint, whatever their age.
NOT_UNITS = re.compile(r"^(events\.out\.tfevents\..*|training_args\.bin|.*\.log)$")
STEP_PATTERNS = (re.compile(r"checkpoint-(\d+)"), re.compile(r"step=(\d+)"),
                 re.compile(r"ckpt-(\d+)"), re.compile(r"iter_(\d+)"),
                 re.compile(r"step_(\d+)"))
SKIP_DIRS = frozenset({".git", "__pycache__", "node_modules", ".venv", "venv",
                       "site-packages", ".cache", ".gpuroom", "wandb"})
MAX_DEPTH = 4
MAX_ENTRIES = 5000
MAX_UNITS = 200
MAX_UNIT_FILES = 1000  # files listed per directory unit
MAX_GLOB_MATCHES = 200
DEADLINE_S = 2.0
FRESH_S = 3.0  # modified this recently: possibly still being written
RESTAT_S = 0.2  # the pause between the two stats that catch a growing file


def step_of(name: str) -> Optional[int]:
    """The step a unit's name states (``checkpoint-20``, ``epoch=0-step=5.ckpt``), or None."""
    for pattern in STEP_PATTERNS:
        found = pattern.search(name)
        if found:
            return int(found.group(1))
    return None


def is_unit_file(name: str) -> bool:
    return name.endswith(UNIT_SUFFIXES) and not NOT_UNITS.match(name)


class _Bound:
    def __init__(self, max_entries: int, deadline_s: float) -> None:
        self.left = max_entries
        self.deadline = time.monotonic() + deadline_s
        self.cut = ""

    def spend(self, n: int) -> bool:
        self.left -= n
        if self.left < 0:
            self.cut = "more entries than one walk looks at"
        elif time.monotonic() > self.deadline:
            self.cut = "the walk ran out of time"
        return not self.cut


def _dir_unit(path: str, bound: _Bound) -> Tuple[List[str], int, float, Dict[str, int]]:
    """A directory unit's files (relative to it), total size, newest mtime and sizes."""
    files: List[str] = []
    sizes: Dict[str, int] = {}
    total, newest = 0, 0.0
    for dirpath, dirs, names in os.walk(path):
        dirs.sort()
        if not bound.spend(len(dirs) + len(names)):
            break
        for name in sorted(names):
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            rel = os.path.relpath(full, path)
            if len(files) < MAX_UNIT_FILES:
                files.append(rel)
            sizes[rel] = st.st_size
            total += st.st_size
            newest = max(newest, st.st_mtime)
    return files, total, newest, sizes


def _unit(cwd: str, path: str, bound: _Bound) -> Optional[Dict[str, Any]]:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    rel = os.path.relpath(path, cwd)
    name = os.path.basename(path.rstrip(os.sep))
    if stat.S_ISDIR(st.st_mode):
        files, size, newest, sizes = _dir_unit(path, bound)
        if not files:
            return None
        return {"path": rel, "kind": "dir", "size": size, "mtime": newest,
                "step": step_of(name), "files": [os.path.join(rel, f) for f in files],
                "_sizes": sizes, "_abs": path}
    if not stat.S_ISREG(st.st_mode):
        return None
    return {"path": rel, "kind": "file", "size": st.st_size, "mtime": st.st_mtime,
            "step": step_of(name), "files": [rel], "_sizes": {"": st.st_size}, "_abs": path}


def _declared(cwd: str, patterns: List[str], bound: _Bound) -> List[Dict[str, Any]]:
    units: List[Dict[str, Any]] = []
    seen = set()
    for pattern in patterns:
        matches = sorted(glob.glob(os.path.join(cwd, os.path.expanduser(pattern))))
        for match in matches[:MAX_GLOB_MATCHES]:
            path = os.path.normpath(match)
            if path in seen or len(units) >= MAX_UNITS:
                continue
            seen.add(path)
            unit = _unit(cwd, path, bound)
            if unit is not None:
                units.append(unit)
    return units


def _discovered(cwd: str, since: float, bound: _Bound) -> List[Dict[str, Any]]:
    units: List[Dict[str, Any]] = []
    base_depth = cwd.rstrip(os.sep).count(os.sep)
    for dirpath, dirs, names in os.walk(cwd):
        if not bound.spend(len(dirs) + len(names)):
            break
        depth = dirpath.count(os.sep) - base_depth
        keep = []
        for d in sorted(dirs):
            if UNIT_DIR.match(d):
                unit = _unit(cwd, os.path.join(dirpath, d), bound)
                if unit is not None and unit["mtime"] >= since:
                    units.append(unit)
            elif d not in SKIP_DIRS and depth < MAX_DEPTH:
                keep.append(d)
        dirs[:] = keep  # a unit dir is one unit, never walked for more
        for name in sorted(names):
            if not is_unit_file(name):
                continue
            unit = _unit(cwd, os.path.join(dirpath, name), bound)
            if unit is not None and unit["mtime"] >= since:
                units.append(unit)
        if len(units) >= MAX_UNITS:
            bound.cut = bound.cut or f"more than {MAX_UNITS} checkpoint units"
            break
    return units[:MAX_UNITS]


def _still_writing(units: List[Dict[str, Any]], now: float) -> List[str]:
    """Units modified within FRESH_S, or whose sizes change between two stats."""
    writing = [u["path"] for u in units if now - float(u["mtime"]) < FRESH_S]
    recent = [u for u in units if u["path"] not in writing and now - float(u["mtime"]) < 60]
    if recent:
        time.sleep(RESTAT_S)
        for u in recent:
            for rel, size in u["_sizes"].items():
                try:
                    st = os.stat(os.path.join(u["_abs"], rel) if rel else u["_abs"])
                except OSError:
                    writing.append(u["path"])  # replaced under us: a save in progress
                    break
                if st.st_size != size or now - st.st_mtime < FRESH_S:
                    writing.append(u["path"])
                    break
    return writing


def output_files(cwd: str, patterns: List[str]) -> List[str]:
    """The regular files the job's ``--output`` globs match now, relative to ``cwd``."""
    found: List[str] = []
    for pattern in patterns:
        for path in sorted(glob.glob(os.path.join(cwd, pattern)))[:MAX_GLOB_MATCHES]:
            try:
                regular = stat.S_ISREG(os.lstat(path).st_mode)
            except OSError:
                continue
            rel = os.path.relpath(path, cwd)
            if regular and rel not in found:
                found.append(rel)
    return found[:MAX_UNIT_FILES]


def job_units(cwd: Optional[str], since: Optional[float], declared: List[str], *,
              outputs: Optional[List[str]] = None, files: bool = True,
              max_entries: int = MAX_ENTRIES,
              deadline_s: float = DEADLINE_S) -> Optional[Dict[str, Any]]:
    """The job's checkpoint units under ``cwd``: ``declared`` globs when given, else those
    discovered written at or after ``since``; None when there is no cwd or start yet.
    ``outputs``: its --output globs, whose files are listed beside (the gate's)."""
    if not cwd or not os.path.isdir(cwd) or (since is None and not declared):
        return None
    cwd = os.path.abspath(cwd)
    bound = _Bound(max_entries, deadline_s)
    source = "declared" if declared else "discovered"
    found = _declared(cwd, declared, bound) if declared else \
        _discovered(cwd, float(since or 0), bound)
    writing = _still_writing(found, time.time())
    units = []
    for u in sorted(found, key=lambda u: (u["mtime"], u["path"])):
        if u["path"] in writing:
            continue
        clean = {k: v for k, v in u.items() if not k.startswith("_")}
        if not files:
            clean.pop("files")
        units.append(clean)
    return {"source": source, "cwd": cwd, "declared": list(declared), "units": units,
            "writing": sorted(writing), "cut": bound.cut or None,
            "outputs": output_files(cwd, list(outputs or []))}


def newest_unit(found: Optional[Dict[str, Any]]) -> Optional[Dict[str, Any]]:
    """The probe's ``checkpoint`` of a job from its units: the newest finished one."""
    if not found or not found["units"]:
        return None
    unit = found["units"][-1]  # sorted by mtime
    return {"path": os.path.join(found["cwd"], unit["path"]), "size": unit["size"],
            "mtime": unit["mtime"], "save_s": None, "step": unit["step"],
            "source": found["source"], "kind": unit["kind"]}
