"""``manifest DIR``: every file under DIR with size, mtime and sha256, as one JSON document.

The jump host pulls against this list and checks each file's hash against it, so the hash is
taken here, next to the bytes. Hashing a checkpoint dir is the expensive part, so digests are
cached in ``~/.gpuroom/cache/manifest-<hash of DIR>.json`` keyed by (path, size, mtime_ns): a
second manifest of an unchanged dir reads only metadata. Symlinks are listed with their
target and never followed or hashed: a link can point anywhere on the box (a dataset, /etc),
and pulling its target would be pulling something the user never asked for.

Bounded in file count and wall time: a cut answer says ``complete: false`` and why, so the
jump host never mistakes a partial list for the whole dir. Standard library only (py3.8+).

``--defer-above BYTES`` lists files of that size or more with ``sha256: null, deferred: true``
unless the cache knows them: a pull starts moving a big file at once and asks for its digest
(``--only``) while the bytes travel, instead of waiting for the box to read the file twice.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import stat
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from . import selfexit
from .safeopen import open_regular, special_kind

SCHEMA = 1
DEFAULT_MAX_FILES = 100000
DEFAULT_DEADLINE_S = 120.0
FRESH_NS = 2 * 10**9  # files modified within 2 s are hashed but not cached
HASH_CHUNK = 1 << 20  # 1 MiB reads: large enough for throughput, small for deadline checks

CacheKey = Tuple[str, int, int]
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def cache_path(root: str) -> str:
    digest = hashlib.sha256(root.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return os.path.join(os.path.expanduser("~"), ".gpuroom", "cache",
                        "manifest-" + digest + ".json")


def load_cache(path: str, root: str) -> Dict[str, List[Any]]:
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return {}  # no cache or a broken one: hash everything again, never trust junk
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("dir") != root \
            or not isinstance(doc.get("entries"), dict):
        return {}
    # A digest read from here is reported as the file's sha256 without reading the file, so
    # an entry of any other shape (another helper's format, a hand edit) is dropped, not used.
    return {rel: entry for rel, entry in doc["entries"].items() if _is_entry(entry)}


def _is_entry(entry: Any) -> bool:
    """``[size, mtime_ns, sha256 hex]``, as ``build`` writes it."""
    return (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], int)
            and isinstance(entry[1], int) and isinstance(entry[2], str)
            and _SHA256_HEX.fullmatch(entry[2]) is not None)


def save_cache(path: str, root: str, entries: Dict[str, List[Any]]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp-" + str(os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"schema": SCHEMA, "dir": root, "entries": entries}, f)
    os.replace(tmp, path)


class _Cut(Exception):
    """The file-count or time bound was reached."""


def _hash_file(path: str, deadline: float) -> str:
    h = hashlib.sha256()
    with open_regular(path) as f:
        while True:
            chunk = f.read(HASH_CHUNK)
            if not chunk:
                return h.hexdigest()
            h.update(chunk)
            if time.monotonic() > deadline:
                raise _Cut("deadline")


def _walk(root: str, rel: str, out: List[Tuple[str, Any]]) -> None:
    with os.scandir(os.path.join(root, rel) if rel else root) as it:
        entries = sorted(it, key=lambda e: e.name)
    for entry in entries:
        child = rel + "/" + entry.name if rel else entry.name
        if entry.is_dir(follow_symlinks=False):
            _walk(root, child, out)
        else:
            out.append((child, entry))


def build(root_arg: str, max_files: int = DEFAULT_MAX_FILES,
          deadline_s: float = DEFAULT_DEADLINE_S, only: Optional[List[str]] = None,
          use_cache: bool = True, *, defer_above: Optional[int] = None) -> Dict[str, Any]:
    started = time.monotonic()
    deadline = started + deadline_s
    root = os.path.abspath(os.path.expanduser(root_arg))
    doc: Dict[str, Any] = {"schema": SCHEMA, "dir": root, "files": [], "complete": True,
                           "reason": None, "cache_hits": 0, "hashed": 0, "deferred": 0,
                           "total_bytes": 0}
    if not os.path.isdir(root):
        doc.update(complete=False, reason="not a directory: " + root)
        return doc
    cpath = cache_path(root)
    cache = load_cache(cpath, root) if use_cache else {}
    new_cache: Dict[str, List[Any]] = dict(cache)
    found: List[Tuple[str, Any]] = []
    if only:
        for rel in only:
            p = os.path.join(root, rel)
            try:
                os.lstat(p)
            except OSError:
                doc["files"].append({"path": rel, "kind": "missing"})
                continue
            found.append((rel, None))
    else:
        _walk(root, "", found)
    files: List[Dict[str, Any]] = doc["files"]
    try:
        for rel, _entry in found:
            if len(files) >= max_files:
                raise _Cut(f"more than {max_files} files")
            if time.monotonic() > deadline:
                raise _Cut("deadline")
            path = os.path.join(root, rel)
            try:
                rel.encode("utf-8")
            except UnicodeEncodeError:
                files.append({"path": rel.encode("utf-8", "surrogateescape").decode(
                    "utf-8", "replace"), "kind": "other", "reason": "name is not UTF-8"})
                continue
            try:
                st = os.lstat(path)
            except OSError as exc:
                files.append({"path": rel, "kind": "missing", "reason": str(exc)})
                continue
            if stat.S_ISLNK(st.st_mode):
                files.append({"path": rel, "kind": "symlink", "target": os.readlink(path)})
                continue
            if not stat.S_ISREG(st.st_mode):
                files.append({"path": rel, "kind": "other",
                              "reason": f"{special_kind(st.st_mode)} on the box"})
                continue
            cached = cache.get(rel)
            if cached and cached[0] == st.st_size and cached[1] == st.st_mtime_ns:
                digest = cached[2]
                doc["cache_hits"] += 1
            elif defer_above is not None and st.st_size >= defer_above:
                files.append({"path": rel, "kind": "file", "size": st.st_size,
                              "mtime_ns": st.st_mtime_ns, "sha256": None, "deferred": True})
                doc["deferred"] += 1
                doc["total_bytes"] += st.st_size
                continue
            else:
                try:
                    digest = _hash_file(path, deadline)
                except OSError as exc:
                    files.append({"path": rel, "kind": "unreadable", "reason": str(exc)})
                    continue
                doc["hashed"] += 1
                # A file still being written can change again within the same mtime tick;
                # caching it would pin a stale digest to an unchanged key.
                if time.time_ns() - st.st_mtime_ns > FRESH_NS:
                    new_cache[rel] = [st.st_size, st.st_mtime_ns, digest]
            files.append({"path": rel, "kind": "file", "size": st.st_size,
                          "mtime_ns": st.st_mtime_ns, "sha256": digest})
            doc["total_bytes"] += st.st_size
    except _Cut as cut:
        doc.update(complete=False, reason=str(cut))
    if use_cache and doc["hashed"]:
        try:
            save_cache(cpath, root, new_cache)
        except OSError as exc:
            doc["cache_error"] = str(exc)  # the manifest stands; only the next one is slower
    doc["elapsed_s"] = round(time.monotonic() - started, 3)
    return doc


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote manifest")
    parser.add_argument("dir")
    parser.add_argument("--max-files", type=int, default=DEFAULT_MAX_FILES)
    parser.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE_S,
                        help="seconds before the answer is cut (complete: false)")
    parser.add_argument("--only", action="append", default=None, metavar="REL",
                        help="list just this relative path (repeatable)")
    parser.add_argument("--no-cache", action="store_true")
    parser.add_argument("--defer-above", type=int, default=None, metavar="BYTES",
                        help="list uncached files this big or bigger without hashing them")
    args = parser.parse_args(argv)
    # Hashing stops itself at --deadline; a read stuck in the kernel does not.
    selfexit.exit_after(max(args.deadline, 0.0) + 120.0)
    doc = build(args.dir, args.max_files, args.deadline, args.only, not args.no_cache,
                defer_above=args.defer_above)
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
