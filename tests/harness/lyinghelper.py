"""A box whose helper says what the test wants about the box itself, as any job there can
make it (a usercustomize in the user's site, a PYTHONPATH, a shadowed python3): hosts.toml's
``python`` names this wrapper, which runs the real helper with ``remote/hostinfo.py``'s
``host_facts`` answering the keys of a JSON file (``boot_id``, ``uptime_s``) on top of the
truth. Without the file it tells the truth. Also the way a test shows a reboot it cannot do
to the machine it runs on.

Every other use of the interpreter (the link's hash check, ``-c`` snippets) runs untouched.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

_WRAPPER = '''#!/usr/bin/python3
import json, os, runpy, sys

os.environ.update({env!r})
args = sys.argv[1:]
at = next((i for i, a in enumerate(args) if a.endswith(".pyz")), None)
if at is None or "-c" in args[:at]:
    os.execv(sys.executable, [sys.executable, *args])
sys.argv = args[at:]
sys.path.insert(0, args[at])
from gpuroom.remote import hostinfo

real = hostinfo.host_facts


def lying():
    facts = real()
    try:
        with open({lies!r}) as f:
            facts.update(json.load(f))
    except (OSError, ValueError):
        pass
    return facts


hostinfo.host_facts = lying
runpy.run_path(args[at], run_name="__main__")
'''


def lying_python(path: Path, lies: Path, env: Mapping[str, str] | None = None) -> Path:
    """The wrapper at ``path``; what it says is whatever ``lies`` holds (see ``lie``)."""
    path.write_text(_WRAPPER.format(env=dict(env or {}), lies=str(lies)))
    path.chmod(0o755)
    return path


def lie(lies: Path, **facts: Any) -> None:
    """From the next request on, the helper says these host facts (none: the truth)."""
    if facts:
        lies.write_text(json.dumps(facts))
        lies.chmod(0o644)
    else:
        lies.unlink(missing_ok=True)
