"""Issue 17 item 9: display processes (type G) do not make a GPU shared for GEN7."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuroom.remote.gpu import parse_nvsmi_table
from gpuroom.tui.rules.doctor import gpu_findings
from gpuroom.tui.snapshot import read_snapshot


def _capture(fixtures: Path) -> dict[str, Any]:
    text = (fixtures / "nvsmi_table" / "driver460-gtx1080-with-processes.txt").read_text()
    return parse_nvsmi_table(text.split("\n---\n", 1)[-1])


def test_xorg_and_gnome_shell_on_a_card_are_not_gen7(fixtures: Path) -> None:
    capture = _capture(fixtures)
    procs = capture["processes"]
    assert [p["type"] for p in procs] == ["G", "G"]
    gpu = {**capture["gpus"][0], "processes": procs}
    assert gpu_findings("box", None, read_snapshot({"gpus": [gpu]})) == []
    # A compute process beside them is one run, still not a shared card; two are (GEN7).
    runs = [{"pid": 10, "type": "C"}, {"pid": 11, "type": "C+G"}]
    gpu = {**capture["gpus"][0], "processes": [*procs, *runs]}
    [finding] = gpu_findings("box", None, read_snapshot({"gpus": [gpu]}))
    assert (finding.id, finding.seen) == ("GEN7", "pids 10, 11")
