"""Acknowledged job deaths (tui/fleet/acks.py): one file in the jump host's state dir that
`gpuroom doctor --ack`, `watch` and the room's clear share; an ack holds for the attempt it
named, so the next death of the same job is new."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.fleet.acks import Acks, parse_target


def test_an_ack_holds_for_its_attempt_only(tmp_path: Path) -> None:
    path = tmp_path / "acks.json"
    Acks(path).add("box", "j3", 2, now=100.0)
    acks = Acks(path)  # another process reads what the first wrote
    assert acks.acked("box", "j3", 2)
    assert not acks.acked("box", "j3", 3)  # relaunched and dead again: new
    assert not acks.acked("other", "j3", 2)
    assert (path.stat().st_mode & 0o777) == 0o600


def test_the_state_dir_it_creates_is_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "gpuroom" / "acks.json"
    Acks(path).add("box", "j1", 1, now=1.0)
    assert (path.parent.stat().st_mode & 0o777) == 0o700


def test_a_damaged_file_reads_as_no_acks_and_is_replaced_on_the_next_ack(tmp_path: Path) -> None:
    path = tmp_path / "acks.json"
    path.write_text("{not json")
    acks = Acks(path)
    assert not acks.acked("box", "j1", 1)
    acks.add("box", "j1", 1, now=1.0)
    assert json.loads(path.read_text())["acks"][0]["job"] == "j1"


@pytest.mark.parametrize("target", ["box", "/j1", "box/", "box/j1/x y", "box/../j1"])
def test_a_target_that_is_not_host_slash_job_is_a_usage_error(target: str) -> None:
    with pytest.raises(GpuroomError) as info:
        parse_target(target)
    assert "HOST/JOB" in str(info.value)


def test_a_target_names_host_and_job() -> None:
    assert parse_target("h100-a/j12") == ("h100-a", "j12")
