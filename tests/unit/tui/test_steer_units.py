"""Queue control on the jump host (issue 20), no daemon: `queue add --host any` picks the host
with the asked GPUs and VRAM free (tui/rules/placement.py), `queue show`'s lines
(tui/present/jobdetail.py), and `queue edit`'s options written after the job."""

from __future__ import annotations

from typing import Any

import pytest

from gpuroom.tui.model import LinkState
from gpuroom.tui.present.jobdetail import checkpoint_step, detail_lines
from gpuroom.tui.rules.placement import Candidate, choose_host
from gpuroom.tui.snapshot import read_queue_view, read_snapshot


def gpu(index: int, used: float, *procs: str) -> dict[str, Any]:
    return {"index": index, "mem_used_mib": used, "mem_total_mib": 24576.0,
            "processes": [{"pid": 100 + n, "type": t} for n, t in enumerate(procs)]}


def up(name: str, *gpus: dict[str, Any]) -> Candidate:
    return Candidate(name, LinkState.UP, read_snapshot({"gpus": list(gpus)}))


def test_the_host_with_the_asked_gpus_free_is_picked_and_the_reason_said() -> None:
    busy = up("busy", gpu(0, 20000, "C"), gpu(1, 100))
    desk = up("desk", gpu(0, 300, "G", "G"), gpu(1, 10))  # display processes hold nothing
    gone = Candidate("gone", LinkState.DOWN, None, "ssh: connection refused")
    placed = choose_host([busy, gone, desk], gpus=2, vram_mib=None)
    assert placed.host == "desk"
    assert placed.why.startswith("picked desk for 2 GPU(s): desk: 2 of 2 GPU(s) free")
    assert placed.seen[0].startswith("busy: 1 of 2 GPU(s) free")
    assert placed.seen[1] == "gone: down (ssh: connection refused)"


def test_vram_asked_per_gpu_rules_out_a_card_with_too_little_free() -> None:
    a = up("a", gpu(0, 4000), gpu(1, 100))
    placed = choose_host([a], gpus=1, vram_mib=24000)
    assert placed.host == "a" and "1 of 2 GPU(s) free with 24000 MiB" in placed.why
    none = choose_host([a], gpus=2, vram_mib=24000)
    assert none.host is None
    assert none.why == "no host has 2 GPU(s) with 24000 MiB each free right now"


def test_most_free_gpus_wins_and_a_cpu_job_takes_any_up_host() -> None:
    one = up("one", gpu(0, 0))
    two = up("two", gpu(0, 0), gpu(1, 0))
    assert choose_host([one, two], gpus=1, vram_mib=None).host == "two"
    cpu = up("cpu")
    assert choose_host([Candidate("x", LinkState.STALE, None), cpu], 0, None).host == "cpu"


@pytest.mark.parametrize(("path", "step"), [("/c/step_1200.pt", 1200), ("/c/ckpt-3-of-9", 9),
                                            ("/c/latest.pt", None), (None, None)])
def test_checkpoint_step_is_the_last_number_of_the_name(path: str | None,
                                                        step: int | None) -> None:
    assert checkpoint_step(path) == step


@pytest.mark.attack("hostile text", "a job name, argv, env key and reason carrying OSC 52, "
                    "CSI 2J and BEL, shown by queue show's lines")
def test_detail_lines_are_inert_and_never_show_env_values() -> None:
    evil = "x\x1b]52;c;ZXZpbA==\x07\x1b[2J"
    view = read_queue_view({"queue": "default", "jobs": [{
        "id": "j7", "name": evil, "state": "failed", "reason": evil, "argv": ["sh", evil],
        "cwd": "/w", "env": {evil: "s3cret", "HF_TOKEN": "hf_abc"}, "gpus": 2, "priority": 4,
        "after": ["j5"], "edited_from": "j6", "log": "/q/logs/j7.log", "ckpt_dir": "/c/j7",
        "checkpoint": {"path": "/c/j7/step_40.pt", "size": 2048, "mtime": 1000.0},
        "attempts": [{"attempt": 1, "start": 0.0, "end": 65.0, "exit_code": None,
                      "signal": "SIGKILL", "duration": 65.0, "end_reason": "killed",
                      "gpus": [0, 1]}]}]})
    lines = detail_lines(view.jobs[0], now=1060.0)
    text = "\n".join(lines)
    assert "\x1b" not in text and "\x07" not in text
    assert "s3cret" not in text and "hf_abc" not in text and "HF_TOKEN" in text
    assert "GPUs: asked 2, given 0,1" in lines
    assert "priority: 4" in lines and "after: j5" in lines and "edited from: j6" in lines
    assert "  attempt 1: 1970-01-01 00:00:00 -> 00:01:05 UTC (1m), signal SIGKILL, killed, " \
        "GPUs 0,1" in lines, lines
    assert "newest checkpoint: /c/j7/step_40.pt (step 40, 1m old, 2.0KiB)" in lines, lines
    assert "log: /q/logs/j7.log" in lines


@pytest.mark.parametrize(("cli", "env", "gpus", "argv"), [
    (["queue", "edit", "box", "j3", "--env", "A=1", "--gpus", "2"], ["A=1"], 2, []),
    (["queue", "edit", "box", "j3", "--env", "A=1", "--", "python", "--lr", "3"], ["A=1"],
     None, ["python", "--lr", "3"]),
    (["queue", "edit", "box", "j3", "--", "sh", "--env", "x"], [], None, ["sh", "--env", "x"]),
])
def test_queue_edit_options_after_the_job_are_options(cli: list[str], env: list[str],
                                                      gpus: int | None, argv: list[str]) -> None:
    from gpuroom.tui.cli.main import build_parser
    from gpuroom.tui.cli.queue import job_argv

    args = build_parser().parse_args(cli)
    assert job_argv(args) == argv
    assert job_argv(args) == argv  # a second read parses nothing again (no --env twice)
    assert (args.env, args.gpus, args.job) == (env, gpus, "j3")


def test_a_fleet_with_fewer_gpus_than_asked_says_waiting_will_not_help() -> None:
    """On a CPU fleet `queue add any` said "wait", where only --gpus 0 can run the job."""
    cpu = choose_host([up("cpu-a"), up("cpu-b")], gpus=1, vram_mib=None)
    assert (cpu.host, cpu.most_gpus) == (None, 0)
    assert cpu.why == "no host has 1 GPU(s): the most any has is 0"
    small = choose_host([up("one", gpu(0, 0)), up("two", gpu(0, 0), gpu(1, 0))], gpus=4,
                        vram_mib=None)
    assert (small.host, small.most_gpus) == (None, 2)
    # A host that did not answer may have the GPUs: then it is a wait after all.
    gone = Candidate("gone", LinkState.DOWN, None, "timed out")
    assert choose_host([up("cpu-a"), gone], gpus=1, vram_mib=None).most_gpus is None
    busy = choose_host([up("busy", gpu(0, 20000, "C"))], gpus=1, vram_mib=None)
    assert (busy.most_gpus, busy.why) == (None, "no host has 1 GPU(s) free right now")
