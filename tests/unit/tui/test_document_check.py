"""A helper's answer is checked before it is taken as UP: another schema or a wrongly typed
section is a host error naming what was wrong, never an empty box shown healthy (issue 18)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from paths import DATA

from gpuroom.remote import SCHEMA
from gpuroom.tui.snapshot import snapshot_problems
from gpuroom.tui.transport.link import LinkError, check_document


def _real() -> dict[str, Any]:
    """A snapshot the real helper wrote (tests/data is produced by it)."""
    data = json.loads((DATA / "scenario-healthy.json").read_text())
    snap: dict[str, Any] = data["hosts"][0]["snapshot"]
    return snap


def test_a_real_snapshot_has_no_problems() -> None:
    snap = _real()
    assert snapshot_problems(snap, SCHEMA) == []
    assert check_document("box", snap) == snap


@pytest.mark.parametrize(("change", "said"), [
    ({"schema": 999}, "schema 999, expected 1"),
    ({"schema": None}, "schema None, expected 1"),
    ({"host": "box-1"}, "section 'host' is a string, expected an object"),
    ({"gpus": {"0": {}}}, "section 'gpus' is an object, expected a list"),
    ({"disks": 7}, "section 'disks' is a number, expected a list"),
    ({"queue": ["j1"]}, "section 'queue' is a list, expected an object"),
])
@pytest.mark.attack(
    "bad answers",
    "schema 999 or a section of the wrong type: a host error naming both, never UP")
def test_wrong_schema_or_section_type_is_a_host_error(change: dict[str, Any], said: str) -> None:
    snap = {**_real(), **change}
    assert snapshot_problems(snap, SCHEMA) == [said]
    with pytest.raises(LinkError) as err:
        check_document("box", snap)
    text = str(err.value)
    assert text.startswith("box: the helper's answer is not a schema-1 probe document: ")
    assert said in text and "~/.gpuroom/bin" in text


@pytest.mark.attack("bad answers", "an answer that is not a JSON object: refused")
def test_every_problem_is_counted_and_a_non_document_is_refused() -> None:
    snap = {**_real(), "schema": 2, "host": [], "cgroup": "x"}
    assert len(snapshot_problems(snap, SCHEMA)) == 3
    with pytest.raises(LinkError, match=r"\(\+2 more\)"):
        check_document("box", snap)
    assert snapshot_problems(["not", "a", "dict"], SCHEMA) == [
        "the answer is a list, not a probe document"]


@pytest.mark.attack(
    "injection",
    "a non-UTF-8 byte in a job's argv: refused naming its position, no UnicodeEncodeError")
def test_a_non_utf8_argument_is_refused_by_position_not_raised_as_unicode_error() -> None:
    # Issue 18 item 8: `queue add h -- python $'\xff'.py` gave a raw UnicodeEncodeError.
    from gpuroom.tui.errors import GpuroomError
    from gpuroom.tui.transport.link import remote_command

    assert remote_command(["queue", "add", "--", "echo", "a b", "ü"]) == (
        "queue add -- echo 'a b' 'ü'")
    bad = "\udcff.py"  # how Python holds the byte 0xff of a non-UTF-8 argv
    with pytest.raises(GpuroomError) as err:
        remote_command(["queue", "add", "--", "python", bad])
    text = str(err.value)
    assert "argument 4 of the command to the box" in text
    assert "not valid UTF-8 (byte 0xff at 0)" in text
    assert "Fix: ssh carries commands as text" in text
    assert "\udcff" not in text  # the message itself is printable
