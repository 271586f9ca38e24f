"""The helper's own identity: the sha256 of the zipapp it runs from (U42)."""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Optional

_cached: Optional[str] = None


def archive_path() -> Optional[str]:
    """Path of the .pyz this code was imported from, None when run from a source tree."""
    loader = globals().get("__loader__")
    archive = getattr(loader, "archive", None)
    if archive:
        return str(archive)
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0.endswith(".pyz") and os.path.isfile(argv0):
        return argv0
    return None


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def own_sha256() -> Optional[str]:
    """Hashed once per process: a serve helper answers many requests from one file."""
    global _cached
    if _cached is None:
        path = archive_path()
        _cached = sha256_file(path) if path else ""
    return _cached or None
