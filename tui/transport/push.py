"""Push one verified file from the jump host into a directory on a box (issue 21 `queue move`).

The file lands under a dot-named temp name and is renamed into place only once all of it is
written, so a reader on the box (remote/checkpoint.py's ``ckpt-<step>.pt`` scan) never sees
half a checkpoint. Then the box's own manifest hashes it: it counts as arrived only when that
sha256 equals the one the jump host verified, else the file is removed and PushError says so.
"""

from __future__ import annotations

import posixpath
import secrets
from pathlib import Path

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.transport.link import HostLink, LinkError, PushIO
from gpuroom.tui.transport.pull import box_file_entry


class PushError(GpuroomError):
    """The file did not arrive intact on the box; nothing is left under its name."""


async def push_file(link: HostLink, local: Path, remote_dir: str, name: str,
                    sha256: str) -> None:
    """Copy ``local`` to ``remote_dir/name`` on the box, atomically, and check the box's
    sha256 of it against ``sha256``. LinkError when the box cannot be reached."""
    if "/" in name or name.startswith(".") or not remote_dir.startswith("/"):
        raise ValueError(f"not a plain file name in an absolute dir: {remote_dir!r} {name!r}")
    final = posixpath.join(remote_dir, name)
    tmp = posixpath.join(remote_dir, f".{name}.tmp-gpuroom-{secrets.token_hex(4)}")
    io = PushIO(link)
    try:
        await io.put_path(local, tmp, final)
    except LinkError:
        await io.remove(tmp)  # dot-named: the Checkpointer never reads it anyway
        raise
    entry = await box_file_entry(link, remote_dir, name, local.stat().st_size)
    if entry is None or entry.get("sha256") != sha256:
        await io.remove(final)
        got = "gone" if entry is None else f"sha256 {str(entry.get('sha256'))[:12]}…"
        raise PushError(f"{link.name}: {final} arrived as {got}, not {sha256[:12]}…: removed",
                        "check the box's disk (df -h, dmesg), then move again")
