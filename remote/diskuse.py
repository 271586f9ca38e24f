"""``gpuroom-remote du``: where the bytes AND the inodes went (U7, principle 5).

A disk dies on inodes before bytes, and the real hog is often a cache symlinked onto another
disk. So every top-level child gets both numbers, symlinks are reported with their target
instead of being followed (following them would double-count the HF cache's snapshot links and
walk off onto other disks), and the walk stays on the filesystem it started on.

The walk is bounded by an entry count and a deadline; the answer says whether it finished
(``complete``), so a partial total is never mistaken for the whole.

``parse_df`` reads ``df -h`` / ``df -i`` / ``df -hi`` / ``df -P -B1`` output for the places
where a human pasted df, or a box only has df to offer.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any, Dict, List, Optional, Set, Tuple

DEFAULT_PATHS = ["~/.cache/huggingface", "~/.cache/torch", "~/.cache/pip", "."]
MAX_ENTRIES = 500000  # ~1-2 s of scandir on a local SSD; a million-file eval dir stops here
DEADLINE_S = 10.0
TOP_N = 15
MAX_LISTED_LINKS = 20  # symlinks leaving the tree / other mounts listed per root

_HUMAN = re.compile(r"^(?P<num>\d+(?:\.\d+)?)(?P<unit>[KMGTPEZY])$")
_BLOCKS = re.compile(r"^(?P<num>\d+)(?:(?P<unit>[KMGTPEZYkmgtpezy])(?P<si>B)?|B)?-blocks$")
_UNITS = "KMGTPEZY"


class Budget:
    """Entries and time left for one ``du`` call, shared by every path it walks."""

    def __init__(self, max_entries: int, deadline_s: float) -> None:
        self.entries = 0
        self.max_entries = max_entries
        self.deadline = time.monotonic() + deadline_s
        self.exhausted: Optional[str] = None

    def take(self) -> bool:
        if self.exhausted is not None:
            return False
        self.entries += 1
        if self.entries > self.max_entries:
            self.exhausted = "entries"
        # Checking the clock on every entry costs more than the stat; every 256 is enough.
        elif self.entries & 0xFF == 0 and time.monotonic() > self.deadline:
            self.exhausted = "deadline"
        return self.exhausted is None


def _new_tally(name: str, kind: str) -> Dict[str, Any]:
    return {"name": name, "type": kind, "bytes": 0, "apparent_bytes": 0, "files": 0,
            "dirs": 0, "inodes": 0, "symlink": None}


def _inside(target: str, root: str) -> bool:
    return target == root or target.startswith(root.rstrip(os.sep) + os.sep)


class _Walk:
    """One root's walk: tallies per top-level child, hard links counted once."""

    def __init__(self, root: str, device: int, budget: Budget) -> None:
        self.root = root
        self.device = device
        self.budget = budget
        self.seen_links: Set[Tuple[int, int]] = set()
        self.links_out: List[Dict[str, str]] = []
        self.other_mounts: List[str] = []
        self.unreadable = 0

    def _count(self, tally: Dict[str, Any], st: os.stat_result, is_dir: bool) -> None:
        if st.st_nlink > 1 and not is_dir:
            key = (st.st_dev, st.st_ino)
            if key in self.seen_links:
                return
            self.seen_links.add(key)
        tally["inodes"] += 1
        tally["bytes"] += st.st_blocks * 512
        tally["apparent_bytes"] += st.st_size
        tally["dirs" if is_dir else "files"] += 1

    def _symlink(self, path: str) -> Optional[str]:
        try:
            target = os.readlink(path)
        except OSError:
            return None
        # Lexical resolution: realpath per link would lstat every component of thousands of
        # HF snapshot links, and the walk is already rooted at a real path.
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), target))
        if not _inside(resolved, self.root):
            if len(self.links_out) < MAX_LISTED_LINKS:
                self.links_out.append({"path": path, "target": target, "resolved": resolved})
        return target

    def entry(self, entry: os.DirEntry[str], tally: Dict[str, Any]) -> Optional[str]:
        """Count one entry into tally; return its path when it is a directory to descend."""
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            self.unreadable += 1
            return None
        if entry.is_symlink():
            self._count(tally, st, is_dir=False)
            target = self._symlink(entry.path)
            if tally["type"] == "symlink":
                tally["symlink"] = target
            return None
        if entry.is_dir(follow_symlinks=False):
            if st.st_dev != self.device:
                if len(self.other_mounts) < MAX_LISTED_LINKS:
                    self.other_mounts.append(entry.path)
                return None
            self._count(tally, st, is_dir=True)
            return entry.path
        self._count(tally, st, is_dir=False)
        return None

    def subtree(self, top: str, tally: Dict[str, Any]) -> None:
        stack = [top]
        while stack:
            path = stack.pop()
            try:
                with os.scandir(path) as it:
                    for entry in it:
                        if not self.budget.take():
                            return
                        sub = self.entry(entry, tally)
                        if sub is not None:
                            stack.append(sub)
            except OSError:
                self.unreadable += 1


def _entry_kind(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return "symlink"
    return "dir" if entry.is_dir(follow_symlinks=False) else "file"


def scan(path: str, budget: Budget, top_n: int = TOP_N) -> Dict[str, Any]:
    """Bytes and inodes under path, per top-level child, largest first."""
    shown = os.path.expanduser(path)
    out: Dict[str, Any] = {"path": path, "real_path": None, "exists": False, "symlink": None}
    if os.path.islink(shown):
        # A cache symlinked onto another disk is walked where it really lives (principle 5).
        out["symlink"] = os.readlink(shown)
    real = os.path.realpath(shown)
    out["real_path"] = real
    try:
        st = os.stat(real)
    except OSError as exc:
        out.update(complete=True, error=f"{type(exc).__name__}: {exc.strerror}")
        return out
    out["exists"] = True
    out["device"] = st.st_dev
    walk = _Walk(real, st.st_dev, budget)
    children: List[Dict[str, Any]] = []
    own = _new_tally(".", "dir")
    if os.path.isdir(real):
        walk._count(own, st, is_dir=True)
        try:
            with os.scandir(real) as it:
                tops = list(it)
        except OSError as exc:
            tops = []
            walk.unreadable += 1
            out["error"] = f"{type(exc).__name__}: {exc.strerror}"
        for entry in tops:
            if not budget.take():
                break
            tally = _new_tally(entry.name, _entry_kind(entry))
            sub = walk.entry(entry, tally)
            if sub is not None:
                walk.subtree(sub, tally)
            children.append(tally)
    else:
        walk._count(own, st, is_dir=False)
    totals = _new_tally(".", "dir" if os.path.isdir(real) else "file")
    for tally in [own, *children]:
        for key in ("bytes", "apparent_bytes", "files", "dirs", "inodes"):
            totals[key] += tally[key]
    out.update({
        "bytes": totals["bytes"],
        "apparent_bytes": totals["apparent_bytes"],
        "files": totals["files"],
        "dirs": totals["dirs"],
        "inodes": totals["inodes"],
        "children_count": len(children),
        "by_bytes": sorted(children, key=lambda t: (-t["bytes"], t["name"]))[:top_n],
        "by_inodes": sorted(children, key=lambda t: (-t["inodes"], t["name"]))[:top_n],
        "links_out": walk.links_out,
        "other_mounts": walk.other_mounts,
        "unreadable": walk.unreadable,
        "stopped_by": budget.exhausted,
        "complete": budget.exhausted is None and walk.unreadable == 0,
    })
    return out


def disk_usage(paths: List[str], max_entries: int = MAX_ENTRIES,
               deadline_s: float = DEADLINE_S, top_n: int = TOP_N) -> Dict[str, Any]:
    """The ``du`` document for paths (default: the ML caches and the cwd)."""
    started = time.monotonic()
    budget = Budget(max_entries, deadline_s)
    roots = []
    for path in paths or DEFAULT_PATHS:
        if budget.exhausted is not None:
            roots.append({"path": path, "skipped": True, "complete": False})
            continue
        roots.append(scan(os.getcwd() if path == "." else path, budget, top_n))
    return {
        "du": roots,
        "entries": budget.entries,
        "elapsed_s": round(time.monotonic() - started, 3),
        "complete": all(r["complete"] for r in roots),
    }


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote du")
    parser.add_argument("paths", nargs="*", help="default: " + " ".join(DEFAULT_PATHS))
    parser.add_argument("--max-entries", type=int, default=MAX_ENTRIES)
    parser.add_argument("--deadline-s", type=float, default=DEADLINE_S)
    parser.add_argument("--top", type=int, default=TOP_N)
    args = parser.parse_args(argv)
    doc = disk_usage(args.paths, args.max_entries, args.deadline_s, args.top)
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


def _block_unit(header: str) -> Optional[int]:
    """Bytes per count for a "1K-blocks" / "1-blocks" / "1kB-blocks" header; None for "Size"."""
    m = _BLOCKS.match(header)
    if m is None:
        return None
    unit = m.group("unit")
    if unit is None:
        return int(m.group("num"))
    base = 1000 if m.group("si") else 1024
    return int(m.group("num")) * int(base ** (_UNITS.index(unit.upper()) + 1))


def parse_df_number(text: str, unit: Optional[int] = None) -> Optional[int]:
    """A df cell as a number: "123" (times the header's block unit), "1.5G" (powers of 1024,
    as -h prints; df rounds it up, so it is approximate), "-" or junk -> None."""
    if text.isdigit():
        return int(text) * (unit or 1)
    m = _HUMAN.match(text)
    if m is None:
        return None
    return round(float(m.group("num")) * int(1024 ** (_UNITS.index(m.group("unit")) + 1)))


def parse_df(text: str) -> List[Dict[str, Any]]:
    """``df`` output (-h, -i, -hi, -P, -B1) -> one dict per filesystem.

    Keys: filesystem, mount, unit ("bytes" or "inodes"), total/used/free as numbers (None for
    "-"), the same as printed in total_text/used_text/free_text, and use_pct.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    header = lines[0].split()
    if len(header) < 6 or header[0] != "Filesystem":
        raise ValueError(f"not df output: {lines[0]!r}")
    unit_name = "inodes" if header[1] == "Inodes" else "bytes"
    block_unit = _block_unit(header[1])
    rows: List[Dict[str, Any]] = []
    carried = ""
    for raw in lines[1:]:
        if len(raw.split()) == 1 and not carried:
            carried = raw.strip()  # df without -P wraps a long device name onto its own line
            continue
        line = (carried + " " + raw.strip()) if carried else raw
        carried = ""
        parts = line.split(None, 5)
        if len(parts) < 6:
            continue
        fs, total, used, free, pct, mount = parts
        rows.append({
            "filesystem": fs,
            "mount": mount,
            "unit": unit_name,
            "total": parse_df_number(total, block_unit),
            "used": parse_df_number(used, block_unit),
            "free": parse_df_number(free, block_unit),
            "total_text": total,
            "used_text": used,
            "free_text": free,
            "use_pct": int(pct[:-1]) if pct.endswith("%") and pct[:-1].isdigit() else None,
        })
    return rows
