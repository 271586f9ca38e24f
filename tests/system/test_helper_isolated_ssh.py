"""The helper starts isolated (``python3 -I``): Python startup code planted by anything that
runs as the box's user never runs inside it, over the real sshd.

Planted: a ``usercustomize.py`` in the test user's own user site, and a PYTHONPATH entry whose
``argparse.py`` shadows the standard library's (every helper verb parses its arguments with
it). Each writes a marker when it runs, but only where ``GPUROOM_TEST_STARTUP_MARK`` is set,
which only this test's interpreter wrapper sets: nothing else that runs as the test user
notices them. The user's job still sees its own environment, PYTHONPATH included.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.hostile import add_job, gpuroom, hosts_toml, queue_jobs, wait_for

pytestmark = pytest.mark.sshd

MARK_ENV = "GPUROOM_TEST_STARTUP_MARK"
USERCUSTOMIZE = f"""import os, sys
_mark = os.environ.get({MARK_ENV!r})
if _mark:
    with open(_mark + "/usercustomize-ran", "a") as _f:
        _f.write(" ".join(sys.argv) + "\\n")
"""
SHADOW = f"""import os, sys, sysconfig
_mark = os.environ.get({MARK_ENV!r})
if _mark:
    with open(_mark + "/pythonpath-ran", "a") as _f:
        _f.write(" ".join(sys.argv) + "\\n")
_real = os.path.join(sysconfig.get_paths()["stdlib"], "argparse.py")
with open(_real) as _f:
    exec(compile(_f.read(), _real, "exec"))
"""


class Planted:
    """The startup code on the box, and the wrapper that gives the helper its environment."""

    def __init__(self, box: Any) -> None:
        self.box = box
        self.dir = box.home / "trust-startup"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.marks = self.dir / "marks"
        self.pythonpath = self.dir / "pythonpath"
        for d in (self.marks, self.pythonpath):
            d.mkdir(parents=True)
        (self.pythonpath / "argparse.py").write_text(SHADOW)
        self.python = self.dir / "python3"
        # The environment a box's shell could give any process of its user.
        self.python.write_text(f'#!/bin/sh\nexport PYTHONPATH="{self.pythonpath}" '
                               f'{MARK_ENV}="{self.marks}"\nexec python3 "$@"\n')
        self.python.chmod(0o755)
        site = box.run("python3", "-c", "import site; print(site.getusersitepackages())")
        assert site.returncode == 0, site.stderr
        self.site = Path(site.stdout.strip())
        assert self.site.is_relative_to(box.home), self.site
        # Remove on the way out only what was not there before.
        self.made = next((p for p in (*reversed(self.site.parents), self.site)
                          if p.is_relative_to(box.home) and p != box.home and not p.exists()),
                         None)
        self.site.mkdir(parents=True, exist_ok=True)
        self.usercustomize = self.site / "usercustomize.py"
        assert not self.usercustomize.exists(), f"{self.usercustomize} is someone else's"
        self.usercustomize.write_text(USERCUSTOMIZE)
        user = box.identity.user
        made = (self.made, *self.made.rglob("*")) if self.made is not None else ()
        for path in (self.dir, *self.dir.rglob("*"), *made, self.usercustomize):
            shutil.chown(path, user.uid, user.gid)

    def ran(self) -> dict[str, str]:
        return {p.name: p.read_text() for p in self.marks.iterdir()}

    def remove(self) -> None:
        self.usercustomize.unlink(missing_ok=True)
        if self.made is not None:
            shutil.rmtree(self.made, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def planted(sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Planted]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    plant = Planted(sshd_box)
    try:
        yield plant
    finally:
        sshd_box.run("tmux", "kill-session", "-t", "gpuroom-default")
        plant.remove()


def test_the_planted_code_runs_in_a_plain_python3_of_the_box(planted: Planted) -> None:
    """The plant is live: started the way the helper was before, it runs."""
    done = planted.box.run(str(planted.python), "-c", "import argparse")
    assert done.returncode == 0, done.stderr
    assert set(planted.ran()) == {"usercustomize-ran", "pythonpath-ran"}


@pytest.mark.attack("trust", "a usercustomize.py in the box user's site and a PYTHONPATH "
                    "module shadowing the standard library's argparse: neither runs in the "
                    "helper through a poll, a queue add (and its runner) or a pull, while the "
                    "job still sees its own PYTHONPATH")
def test_planted_startup_code_never_runs_in_the_helper(planted: Planted,
                                                       tmp_path: Path) -> None:
    config = hosts_toml(tmp_path / "hosts.toml",
                        {"box": {"ssh": planted.box.alias, "python": str(planted.python)}},
                        planted.box.ssh_config)
    status = gpuroom(config, "status", "--json")
    assert status.returncode == 0, status.stdout + status.stderr
    assert planted.ran() == {}, "a poll ran the box's startup code"

    job = add_job(config, "--", "sh", "-c", 'echo "$PYTHONPATH" > "$GPUROOM_CKPT_DIR/env.txt"')
    def ended() -> str | None:
        state = str(queue_jobs(config)[job]["state"])
        return state if state in ("succeeded", "failed") else None

    assert wait_for(ended, f"job {job} to end") == "succeeded"
    pulled = gpuroom(config, "pull", "box", job, "--to", str(tmp_path / "pulls"))
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    time.sleep(0.5)  # a runner idling after the job would have written by now
    assert planted.ran() == {}, "the helper or its runner ran the box's startup code"
    seen = (tmp_path / "pulls" / "box" / job / "env.txt").read_text().strip()
    assert str(planted.pythonpath) in seen.split(":"), seen  # the job's env is the user's
