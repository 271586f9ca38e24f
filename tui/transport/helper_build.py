"""Build the box-side helper as a deterministic zipapp named by its sha256 (principle 6, U42).

The archive holds every ``.py`` under ``gpuroom/remote/`` (sub-packages too) from the
installed package plus the pure-Python ``pynvml`` module of the jump host's nvidia-ml-py, so a
box with a driver needs no pip install. Fixed timestamps, modes and a sorted entry order make
the same sources give the same bytes, so the hash names the content and a new version never
overwrites a file a live runner is reading.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import gpuroom.remote

SHEBANG = b"#!/usr/bin/env python3\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
_MAIN = b"import sys\nfrom gpuroom.remote.cli import main\nsys.exit(main())\n"
REMOTE_DIR = "~/.gpuroom/bin"


@dataclass(frozen=True)
class HelperArchive:
    """The zipapp's bytes and the names derived from its hash."""

    data: bytes
    sha256: str

    @property
    def filename(self) -> str:
        return f"remote-{self.sha256[:12]}.pyz"

    @property
    def remote_path(self) -> str:
        """Relative to the login user's home, as SFTP and exec both resolve it."""
        return f".gpuroom/bin/{self.filename}"


def archive_entries(remote_dir: Path) -> list[tuple[str, bytes]]:
    """The archive's (name, bytes), sorted: every ``.py`` under ``remote_dir`` (sub-packages
    included) as ``gpuroom/remote/...``, NVML's bindings and the entry point."""
    entries = [("gpuroom/__init__.py", b"")]
    entries += [
        (f"gpuroom/remote/{p.relative_to(remote_dir).as_posix()}", p.read_bytes())
        for p in sorted(remote_dir.rglob("*.py"))
    ]
    spec = importlib.util.find_spec("pynvml")
    if spec is not None and spec.origin and spec.origin.endswith(".py"):
        entries.append(("pynvml.py", Path(spec.origin).read_bytes()))
    entries.append(("__main__.py", _MAIN))
    return sorted(entries)


def build_bytes(entries: list[tuple[str, bytes]]) -> bytes:
    buf = io.BytesIO()
    buf.write(SHEBANG)
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, payload in entries:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # unix, whatever the jump host is
            zf.writestr(info, payload, compresslevel=9)
    return buf.getvalue()


@lru_cache(maxsize=1)
def helper_archive() -> HelperArchive:
    """The helper for the installed sources, built once per jump-host process."""
    data = build_bytes(archive_entries(Path(gpuroom.remote.__file__).parent))
    return HelperArchive(data=data, sha256=hashlib.sha256(data).hexdigest())
