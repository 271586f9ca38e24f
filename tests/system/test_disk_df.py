"""The disk pane says "df -h | df -i", so its percentages are df's own, checked against the
real df on the test box (issue 17 item 6: ext4's root reserve made them differ by tens of
points)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from gpuroom.tui.cli.main import main
from gpuroom.tui.present.disks import disk_rows
from gpuroom.tui.snapshot import read_snapshot

pytestmark = pytest.mark.sshd


def _df_use(box: Any, *flags: str) -> tuple[int, int, int]:
    """(used, available, Use%) of the box user's home as df prints them (POSIX format)."""
    out = box.run("df", "-P", *flags, str(box.home)).stdout.splitlines()
    fields = out[-1].split()
    return int(fields[2]), int(fields[3]), int(fields[4].rstrip("%"))


def test_disk_row_agrees_with_df_on_the_box(sshd_box: Any, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "hosts.toml"
    config.write_bytes(tomli_w.dumps({"settings": {"ssh_config": str(sshd_box.ssh_config)},
                                      "hosts": {"box": {"ssh": sshd_box.alias}}}).encode())
    config.chmod(0o600)
    # df first and after, so a file written between them shows as a disagreement of at
    # most one point, not a flake.
    before = _df_use(sshd_box, "-B1"), _df_use(sshd_box, "-i")
    assert main(["--config", str(config), "status", "--json"]) == 0
    after = _df_use(sshd_box, "-B1"), _df_use(sshd_box, "-i")
    [host] = json.loads(capsys.readouterr().out)["hosts"]
    [home] = [r for r in disk_rows(read_snapshot(host["snapshot"])) if r.path == "~"]
    assert home.bytes_pct in {before[0][2], after[0][2]}, (home, before, after)
    assert home.inodes_pct in {before[1][2], after[1][2]}, (home, before, after)
    assert home.avail_bytes is not None and home.used_bytes is not None
    assert min(before[0][1], after[0][1]) - (1 << 24) <= home.avail_bytes \
        <= max(before[0][1], after[0][1]) + (1 << 24)
    assert min(before[0][0], after[0][0]) - (1 << 24) <= home.used_bytes \
        <= max(before[0][0], after[0][0]) + (1 << 24)
