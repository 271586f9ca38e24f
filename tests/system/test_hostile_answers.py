"""Bad answers from the box (issue 18): a helper that answers malformed, huge, deeply nested,
wrongly typed, slow or hanging, over the real sshd.

The box runs the real helper through a stand-in interpreter (hosts.toml ``python``): the link's
check snippet and every subcommand reach the real python3, but the ``serve`` channel answers
each request line with the bytes of ``~/answer`` (or hangs while ``~/answer`` says ``hang``),
which is what anything running as the box's user could make it do.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from harness.hostile import TERMINAL_CONTROLS, end_user_processes, hosts_toml

from gpuroom.tui.cli.main import main
from gpuroom.tui.config import HostConfig
from gpuroom.tui.transport.link import HostLink, LinkError

pytestmark = pytest.mark.sshd

# The stand-in interpreter: $1 is -I (the helper starts isolated), $2 the helper's path, $3
# its subcommand.
FAKE_PYTHON = """#!/bin/sh
if [ "$3" = serve ]; then
  while IFS= read -r request; do
    # Hang: wait for a next request that never comes; the channel's close ends it.
    if [ "$(head -c 4 "$HOME/answer")" = hang ]; then read -r request; exit 0; fi
    # Drip: a byte every 0.1 s and never a newline, each under any per-read timeout.
    if [ "$(head -c 4 "$HOME/answer")" = drip ]; then
      printf '{"ok": true, "snapshot": {"pad": "'
      while printf x; do sleep 0.1; done
      exit 0
    fi
    cat "$HOME/answer"
    printf '\\n'
  done
  exit 0
fi
exec python3 "$@"
"""



@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug report the verbs write (internal-errors.log) stays in this test's folder."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


@pytest.fixture
def fake_box(sshd_box: Any) -> Any:
    fake = sshd_box.home / "python-answering"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    sshd_box.fake_python = str(fake)
    yield sshd_box
    end_user_processes(sshd_box.identity.user.uid)  # a stand-in left hanging


def answer(box: Any, body: bytes) -> None:
    (box.home / "answer").write_bytes(body)


async def real_snapshot(box: Any) -> dict[str, Any]:
    link = HostLink(HostConfig(name="box", ssh=box.alias), ssh_config=box.ssh_config)
    try:
        return await link.poll({})
    finally:
        await link.close()


def served(snapshot: Any) -> bytes:
    return json.dumps({"ok": True, "snapshot": snapshot}).encode()


def config_for(box: Any, tmp_path: Path) -> Path:
    return hosts_toml(tmp_path / "hosts.toml",
                      {"box": {"ssh": box.alias, "python": box.fake_python}}, box.ssh_config)


def run_verbs(capsys: pytest.CaptureFixture[str], config: Path
              ) -> dict[str, tuple[int, str, str]]:
    """status, status --json, doctor and probe against the box: (rc, out, err) each."""
    said = {}
    for verb in (["status"], ["status", "--json"], ["doctor"], ["probe", "box"]):
        rc = main(["--config", str(config), *verb])
        out, err = capsys.readouterr()
        said[" ".join(verb)] = (rc, out, err)
    return said


def assert_no_crash_and_inert(said: dict[str, tuple[int, str, str]]) -> None:
    for verb, (rc, out, err) in said.items():
        assert rc != 70 and "Traceback" not in out + err, (verb, out, err)
        assert "internal error" not in err, (verb, err)
        for c in TERMINAL_CONTROLS:
            assert c not in out and c not in err, (verb, repr(c), out[-300:], err[-300:])


def deep(n: int) -> bytes:
    return b'{"ok": true, "snapshot": ' + b"[" * n + b"]" * n + b"}"


BROKEN = {
    "truncated": b'{"ok": true, "snapshot": {"schema": 1, "host": {"hostname": "bo',
    "not an object": b'["ok", true]',
    "not utf-8": b'{"ok": true, "snapshot": "\xff\xfe"}',
    "deeply nested": deep(200_000),
    "error with escapes": json.dumps(
        {"ok": False, "error": "boom \x1b]52;c;ZXZpbA==\x07\x1b[2J\x9b31m\u202e[/]"}).encode(),
    "snapshot null": b'{"ok": true, "snapshot": null}',
    "empty line": b"",
}


@pytest.mark.attack("bad answers", "a serve answer that is truncated, not an object, not UTF-8, "
                    "nested 200,000 deep, null, empty, or an error full of escapes: a host "
                    "error from every verb, no traceback")
@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_answer_is_a_host_error_in_every_verb(
        fake_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    answer(fake_box, BROKEN[case])
    said = run_verbs(capsys, config_for(fake_box, tmp_path))
    assert_no_crash_and_inert(said)
    rc, out, _ = said["status --json"]
    [host] = json.loads(out)["hosts"]
    assert rc == 3 and host["state"] == "down" and host["error"], host
    assert said["probe box"][0] != 0


def _poison_numbers(node: Any, value: Any) -> Any:
    """Every number of a real snapshot (the schema excepted) replaced by ``value``."""
    if isinstance(node, dict):
        return {k: (v if k == "schema" else _poison_numbers(v, value)) for k, v in node.items()}
    if isinstance(node, list):
        return [_poison_numbers(v, value) for v in node]
    if isinstance(node, (int, float)) and not isinstance(node, bool):
        return value
    return node


HUGE_INT = 10 ** 400  # json reads it; float() of it overflows


@pytest.mark.attack("bad answers", "every number of a real snapshot replaced by a 400-digit "
                    "integer, 1e999 or NaN: read as no reading in every verb, no crash")
@pytest.mark.parametrize("poison", ["huge int", "1e999", "NaN"])
async def test_huge_and_non_finite_numbers_in_a_real_snapshot_read_as_no_number(
        fake_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], poison: str) -> None:
    snap = await real_snapshot(fake_box)
    value = {"huge int": HUGE_INT, "1e999": math.inf, "NaN": math.nan}[poison]
    # json.dumps writes inf as Infinity, which json.loads reads back: what a box could send.
    answer(fake_box, served(_poison_numbers(snap, value)))
    said = await _verbs_off_loop(capsys, config_for(fake_box, tmp_path))
    assert_no_crash_and_inert(said)
    out = said["status --json"][1]
    [host] = json.loads(out)["hosts"]
    assert host["state"] in ("up", "down"), host


async def _verbs_off_loop(capsys: pytest.CaptureFixture[str], config: Path
                          ) -> dict[str, tuple[int, str, str]]:
    # The verbs run their own event loop: not inside this test's.
    import asyncio

    return await asyncio.to_thread(run_verbs, capsys, config)


@pytest.mark.attack("bad answers", "a helper that answers once, then hangs on the next poll: a "
                    "host error within the request deadline, then UP again once it answers")
async def test_a_hanging_helper_is_cut_off_at_the_deadline_and_read_again_after(
        fake_box: Any) -> None:
    good = served(await real_snapshot(fake_box))
    answer(fake_box, good)
    link = HostLink(HostConfig(name="box", ssh=fake_box.alias, python=fake_box.fake_python),
                    ssh_config=fake_box.ssh_config, request_timeout_s=2.0)
    try:
        assert (await link.poll({}))["schema"]
        answer(fake_box, b"hang")
        t0 = time.monotonic()
        with pytest.raises(LinkError, match="no answer within"):
            await link.poll({})
        assert time.monotonic() - t0 < 6.0  # the 2 s deadline, not the helper's hour
        assert not link.connected
        answer(fake_box, good)
        assert (await link.poll({}))["schema"]
    finally:
        await link.close()


@pytest.mark.attack("bad answers", "a helper that drips its answer a byte every 0.1 s and never "
                    "ends the line: cut off at the poll's deadline, not held open by each byte")
async def test_a_dripping_answer_is_cut_off_at_the_deadline(fake_box: Any) -> None:
    answer(fake_box, served(await real_snapshot(fake_box)))
    link = HostLink(HostConfig(name="box", ssh=fake_box.alias, python=fake_box.fake_python),
                    ssh_config=fake_box.ssh_config, request_timeout_s=2.0)
    try:
        # Connected first: the first poll of a connection has a longer bound (issue 18 item 12).
        assert (await link.poll({}))["schema"]
        answer(fake_box, b"drip")
        t0 = time.monotonic()
        with pytest.raises(LinkError, match="no answer within"):
            await link.poll({})
        assert time.monotonic() - t0 < 6.0
        assert not link.connected
    finally:
        await link.close()


@pytest.mark.attack("bad answers", "a slow helper (2 s per answer, under the deadline): UP, "
                    "the answer read whole")
async def test_a_slow_answer_under_the_deadline_is_read(fake_box: Any) -> None:
    good = served(await real_snapshot(fake_box))
    slow = fake_box.home / "python-slow"
    slow.write_text(FAKE_PYTHON.replace('    cat "$HOME/answer"',
                                        '    sleep 2; cat "$HOME/answer"'))
    slow.chmod(0o755)
    answer(fake_box, good)
    link = HostLink(HostConfig(name="box", ssh=fake_box.alias, python=str(slow)),
                    ssh_config=fake_box.ssh_config, request_timeout_s=5.0)
    try:
        for _ in range(2):
            snap = await link.poll({})
            assert snap == json.loads(good)["snapshot"]
    finally:
        await link.close()


# A stand-in whose helper subcommands (queue ls, manifest) answer ~/sub-answer; polls are real.
FAKE_SUBCOMMANDS = """#!/bin/sh
case "$3" in queue|manifest) cat "$HOME/sub-answer"; exit 0;; esac
exec python3 "$@"
"""


@pytest.mark.attack("bad answers", "queue ls, gate and pull each given a subcommand answer nested "
                    "200,000 deep: a host error, not an internal error")
@pytest.mark.parametrize("verb", [["queue", "ls", "box"], ["gate", "box"], ["pull", "box"]])
def test_a_deeply_nested_subcommand_answer_is_a_host_error(
        sshd_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: list[str]
        ) -> None:
    fake = sshd_box.home / "python-subcommands"
    fake.write_text(FAKE_SUBCOMMANDS)
    fake.chmod(0o755)
    (sshd_box.home / "sub-answer").write_bytes(b"[" * 200_000 + b"]" * 200_000)
    sshd_box.fake_python = str(fake)
    rc = main(["--config", str(config_for(sshd_box, tmp_path)), *verb, *(
        ["--to", str(tmp_path / "pulled")] if verb[0] == "pull" else [])])
    out, err = capsys.readouterr()
    assert rc not in (0, 70) and "internal error" not in err, (rc, out, err)
    assert "box" in err, err


@pytest.mark.attack("bad answers", "the helper file on the box replaced by a program that would "
                    "answer anything (a job can write it): never run, replaced by the next "
                    "connection, the poll reads the real helper's answer")
def test_a_tampered_helper_is_never_run_and_is_replaced(
        sshd_box: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = hosts_toml(tmp_path / "hosts.toml", {"box": {"ssh": sshd_box.alias}},
                        sshd_box.ssh_config)
    assert main(["--config", str(config), "status", "--json"]) == 0
    capsys.readouterr()
    [pyz] = list((sshd_box.home / ".gpuroom" / "bin").glob("remote-*.pyz"))
    real = pyz.read_bytes()
    ran = sshd_box.home / "tampered-helper-ran"
    ran.unlink(missing_ok=True)
    # A zipapp-shaped impostor: run by python3, it would leave a mark and answer a fake UP.
    impostor = tmp_path / "impostor"
    (impostor / "__main__.py").parent.mkdir()
    (impostor / "__main__.py").write_text(
        f"open({str(ran)!r}, 'w').close()\n"
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    print(json.dumps({'ok': True, 'snapshot': {'schema': 1}}), flush=True)\n")
    import zipapp

    zipapp.create_archive(impostor, pyz)
    assert main(["--config", str(config), "status", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hosts"][0]["state"] == "up"
    assert doc["hosts"][0]["snapshot"]["host"]["hostname"]  # the real helper's answer
    assert pyz.read_bytes() == real and not ran.exists()
