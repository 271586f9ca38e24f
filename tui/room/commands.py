"""The user's own commands from hosts.toml: ``notify_command`` and ``teardown_command``.

Besides the transport (ssh, rsync, the local helper), these are the only processes gpuroom
starts. Each is an argv list the user wrote, never a shell string; its output is untrusted
text and is made inert by the caller before it is shown.
"""

from __future__ import annotations

import asyncio


async def run_user_command(argv: list[str], timeout_s: float) -> tuple[int, bytes]:
    """Run ``argv`` with no stdin; (exit status, stdout and stderr together).

    Raises OSError when it cannot start and asyncio.TimeoutError when it outlives
    ``timeout_s`` (it is killed then, so nothing the room started outlives the call).
    """
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    return proc.returncode or 0, out
