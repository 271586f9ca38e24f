"""``gpuroom-remote rundirs -- CWD SINCE ...``: tracker logs jobs left on the box (U20, P9).

TensorBoard event files and offline wandb runs written under a job's cwd after it started
die with the box unless they are copied home; an online wandb run (``wandb/run-*``) is in the
hosted tracker already. The walk is bounded (depth and entries) so a huge data dir under the
cwd costs the box little; a cut walk says so.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Dict, List

MAX_DEPTH = 5
MAX_ENTRIES = 20000
MAX_DIRS = 64  # cwds per call: the gate asks once for every job
SKIP_DIRS = frozenset({".git", "__pycache__", "node_modules", ".venv", "venv",
                       "site-packages", ".cache", ".gpuroom"})
TB_PREFIX = "events.out.tfevents."


def _newest(path: str) -> float:
    newest, seen = 0.0, 0
    for dirpath, _dirs, names in os.walk(path):
        seen += len(names)
        if seen > MAX_ENTRIES:
            break  # a run this big is reported by what was seen of it
        for n in names:
            try:
                newest = max(newest, os.stat(os.path.join(dirpath, n)).st_mtime)
            except OSError:
                continue
    return newest


def scan(cwd: str, since: float) -> Dict[str, Any]:
    """Run dirs under ``cwd`` with a file written at or after ``since``."""
    found: Dict[str, Dict[str, Any]] = {}
    seen = 0
    cut = False
    base_depth = cwd.rstrip(os.sep).count(os.sep)
    for dirpath, dirs, names in os.walk(cwd):
        seen += len(dirs) + len(names)
        if seen > MAX_ENTRIES:
            cut = True
            break
        depth = dirpath.count(os.sep) - base_depth
        rel_dir = os.path.relpath(dirpath, cwd)
        if os.path.basename(dirpath) == "wandb":
            for d in dirs:
                if d.startswith(("offline-run-", "run-")):
                    newest = _newest(os.path.join(dirpath, d))
                    if newest >= since:
                        kind = "wandb-offline" if d.startswith("offline-") else "wandb"
                        found[os.path.join(rel_dir, d)] = {
                            "path": os.path.normpath(os.path.join(rel_dir, d)), "kind": kind,
                            "newest": newest}
            dirs[:] = []  # a wandb dir is reported by run, not walked further
            continue
        for n in names:
            if not n.startswith(TB_PREFIX):
                continue
            try:
                mtime = os.stat(os.path.join(dirpath, n)).st_mtime
            except OSError:
                continue
            if mtime >= since:
                entry = found.setdefault(rel_dir, {"path": os.path.normpath(rel_dir),
                                                   "kind": "tensorboard", "newest": 0.0,
                                                   "files": 0})
                entry["files"] += 1
                entry["newest"] = max(entry["newest"], mtime)
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and depth < MAX_DEPTH)
    return {"ok": True, "cwd": cwd, "since": since, "truncated": cut,
            "dirs": sorted(found.values(), key=lambda e: e["path"])}


def scan_dir(cwd: str, since: float) -> Dict[str, Any]:
    if not os.path.isdir(cwd):
        return {"ok": True, "cwd": cwd, "since": since, "dirs": [], "truncated": False,
                "missing": True}
    doc = scan(os.path.abspath(cwd), since)
    doc["cwd"] = cwd  # as asked, so the jump host finds its jobs' answer by it
    return doc


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote rundirs")
    parser.add_argument("pairs", nargs="*", metavar="CWD SINCE",
                        help="a job's cwd and when it started (epoch seconds), after --")
    args = parser.parse_args(argv)
    if len(args.pairs) % 2:
        parser.error("give CWD SINCE pairs")
    pairs = [(args.pairs[i], args.pairs[i + 1]) for i in range(0, len(args.pairs), 2)]
    scans = []
    for cwd, since in pairs[:MAX_DIRS]:
        try:
            scans.append(scan_dir(cwd, float(since)))
        except ValueError:
            parser.error(f"{cwd!r}: SINCE must be epoch seconds")
    doc = {"ok": True, "scans": scans, "cut": len(pairs) > MAX_DIRS}
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0
