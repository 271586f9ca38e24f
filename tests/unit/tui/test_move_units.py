"""`queue move`'s pure parts (issue 21 item 2): the path mapping between two hosts'
workdirs, the identical `queue add` it sends, and the lineage both queues show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuroom.tui import config as cfg
from gpuroom.tui.config import HostConfig
from gpuroom.tui.fleet.intent import Intent
from gpuroom.tui.fleet.mirror import MirrorState
from gpuroom.tui.fleet.move import Lineage, Move, add_argv, map_path
from gpuroom.tui.model import HostState
from gpuroom.tui.present.detail import job_detail
from gpuroom.tui.present.jobs import job_rows


def test_paths_under_the_old_workdir_map_to_the_new_one_and_nothing_else() -> None:
    assert map_path("/workspace/run", "/workspace", "/home/u/w") == "/home/u/w/run"
    assert map_path("/workspace", "/workspace", "/home/u/w") == "/home/u/w"
    assert map_path("/workspace2/x", "/workspace", "/home/u/w") == "/workspace2/x"
    assert map_path("--data=/workspace/d", "/workspace", "/w") == "--data=/workspace/d"
    assert map_path("/workspace/run", None, "/w") == "/workspace/run"  # one side unset


def test_the_moved_job_is_the_identical_command_with_mapped_paths() -> None:
    # The job as `queue add` recorded it on the jump host (tui/fleet/intent.py).
    intent = Intent(host="a", job="j7", name="sweep", argv=("python3", "/ws/train.py", "--lr",
                                                            "3e-4"),
                    cwd="/ws/run", env={"DATA": "/ws/d", "SEED": "7"}, gpus=2,
                    vram_mib=30000, retries=1, retry_on_exit=True, outputs=("*.pt",),
                    added_at=1.0)
    a = HostConfig(name="a", ssh="a", workdir="/ws")
    b = HostConfig(name="b", ssh="b", workdir="/home/u/w")
    argv, stdin = add_argv(intent, a, b)
    assert argv == ["--name=sweep", "--cwd=/home/u/w/run", "--env-stdin",
                    "--gpus", "2", "--vram-mib", "30000", "--retries", "1",
                    "--retry-on-exit", "--output=*.pt", "--",
                    "python3", "/home/u/w/train.py", "--lr", "3e-4"]
    # The values go on stdin, never on the box's command line (U34).
    assert stdin is not None and json.loads(stdin) == {"DATA": "/home/u/w/d", "SEED": "7"}
    same, _ = add_argv(intent, a, HostConfig(name="c", ssh="c"))  # no workdir
    assert same[-4:] == ["python3", "/ws/train.py", "--lr", "3e-4"] and "--cwd=/ws/run" in same


def test_both_queues_show_the_lineage(tmp_path: Path) -> None:
    lineage = Lineage(MirrorState(tmp_path / "mirror.json"))
    assert lineage.for_host("a") == {}
    lineage.add(Move("a", "j7", "b", "j3", 40, 1.0))
    assert lineage.for_host("a") == {"j7": "moved to b/j3"}
    assert lineage.for_host("b") == {"j3": "from a/j7"}
    host = HostState(name="b", snapshot={"time": 10.0, "queue": {"jobs": [
        {"id": "j3", "name": "sweep", "state": "running", "argv": ["python3"]}]}},
        last_ok=10.0)
    host.moves = lineage.for_host("b")
    [row] = job_rows(host, 10.0)
    assert row.name_text == "sweep (from a/j7)"
    assert ("moved", "from a/j7") in job_detail(host, row)


@pytest.mark.attack("bad configuration", "a workdir that is not an absolute path")
def test_a_relative_workdir_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "hosts.toml"
    p.write_text('[hosts.a]\nssh = "a"\nworkdir = "ws"\n[hosts.b]\nssh = "b"\n'
                 'workdir = "/workspace/"\n')
    config = cfg.load(p)
    assert "workdir must be an absolute path" in (config.hosts["a"].error or "")
    assert config.hosts["b"].workdir == "/workspace" and config.hosts["b"].error is None


@pytest.mark.attack("bad configuration", "a failover_after_s that is not a positive number")
def test_failover_after_s_is_a_positive_number_of_seconds(tmp_path: Path) -> None:
    p = tmp_path / "hosts.toml"
    assert cfg.load(p).settings.failover_after_s == 600.0
    p.write_text("[settings]\nfailover_after_s = 90\n")
    assert cfg.load(p).settings.failover_after_s == 90.0
    for bad in ("0", "-5", '"ten"'):
        p.write_text(f"[settings]\nfailover_after_s = {bad}\n")
        with pytest.raises(cfg.ConfigError) as err:
            cfg.load(p)
        assert "failover_after_s" in str(err.value) and "Fix:" in str(err.value)
