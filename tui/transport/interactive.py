"""Key ``s``: the user's own interactive ``ssh`` to a host, on the terminal the room hands over.

The argv comes from HostLink.ssh_argv (the user's alias and ssh_config, never a shell string);
this is the one place the room starts ssh itself.
"""

from __future__ import annotations

import subprocess


def run_interactive_ssh(argv: list[str]) -> int:
    """Run ``argv`` attached to the terminal until the user leaves; its exit status."""
    return subprocess.call(argv)
