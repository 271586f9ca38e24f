"""What the helper could not see reaches `status`, `status --json` and `gpuroom doctor`, over
the real sshd (issue 18 item 2's errors[]; issue 17 item 16's unreadable kernel log).

The box is the test sshd's user; its helper runs with a real queue root whose events file the
user may not read (the queue collector raises: a real errors[] entry), and with dmesg refused
as util-linux refuses a user under kernel.dmesg_restrict=1 (tests/fakes/dmesg, the GPU-side
boundary this machine cannot drive).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from harness.boxenv import python_with_env
from paths import ROOT

from gpuroom.tui.cli.main import main

FAKE_DMESG = ROOT / "tests" / "fakes" / "dmesg"


@pytest.fixture
def blind_box(sshd_box: Any, tmp_path: Path) -> Iterator[Path]:
    """hosts.toml for the test box whose helper cannot read dmesg nor its queue's events."""
    user = pwd.getpwnam(sshd_box.user)
    root = sshd_box.home / "gpuroom-blind-test"
    shutil.rmtree(root, ignore_errors=True)
    events = root / "home" / "queues" / "default" / "events.jsonl"
    events.parent.mkdir(parents=True)
    events.write_text(json.dumps({"seq": 1, "t": 0.0, "ev": "configured", "slots": 1}) + "\n")
    shutil.copy(FAKE_DMESG, root / "dmesg")
    env = {"GPUROOM_DMESG": str(root / "dmesg"), "GPUROOM_FAKE_DMESG_MODE": "denied",
           "GPUROOM_HOME": str(root / "home")}
    wrapper = python_with_env(root / "python3", env)
    for path in (root, *root.rglob("*")):
        os.chown(path, user.pw_uid, user.pw_gid)
    events.chmod(0)  # the box's user cannot open it: the queue section fails
    config = tmp_path / "hosts.toml"
    config.write_bytes(tomli_w.dumps({
        "settings": {"ssh_config": str(sshd_box.ssh_config)},
        "hosts": {"box": {"ssh": sshd_box.alias, "python": str(wrapper)}}}).encode())
    config.chmod(0o600)
    try:
        yield config
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.sshd
@pytest.mark.attack("bad answers", "a probe section fails on the box (an unreadable queue "
                    "events file): status, status --json and the doctor say which and why")
def test_a_failed_section_reaches_status_and_the_doctor(
        blind_box: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")  # the tables' cells on one line each
    assert main(["--config", str(blind_box), "status", "--json"]) == 0
    (host,) = json.loads(capsys.readouterr().out)["hosts"]
    assert host["state"] == "up"
    (failed,) = host["section_errors"]
    assert failed["section"] == "queue" and "Permission denied" in failed["error"]

    assert main(["--config", str(blind_box), "status"]) == 0
    table = capsys.readouterr().out
    assert "section queue failed" in table and "PermissionError" in table

    main(["--config", str(blind_box), "doctor", "--json"])
    doc = json.loads(capsys.readouterr().out)
    (finding,) = [f for f in doc["findings"] if f["title"].startswith("the helper's")]
    assert (finding["id"], finding["severity"]) == ("U44", "warn")
    assert "'queue'" in finding["title"] and "Permission denied" in finding["seen"]
    # A warning: the banner is not empty, so the room cannot say "fleet OK".
    assert any("'queue'" in line for line in doc["banner"])


@pytest.mark.sshd
def test_an_unreadable_kernel_log_is_said_with_its_fix(
        blind_box: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "600")
    main(["--config", str(blind_box), "doctor", "--json"])
    doc = json.loads(capsys.readouterr().out)
    found = [f for f in doc["findings"] if "kernel log unreadable" in f["title"]]
    assert len(found) == 1, doc
    blind = found[0]
    assert (blind["id"], blind["severity"]) == ("U44", "info")
    assert "Operation not permitted" in blind["seen"] and "dmesg_restrict=0" in blind["fix"]
    main(["--config", str(blind_box), "doctor"])
    out = capsys.readouterr().out
    assert "kernel log unreadable: Xid and OOM-kill detection is blind" in out
    assert "kernel.dmesg_restrict=0" in out
