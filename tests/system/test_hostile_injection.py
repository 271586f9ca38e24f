"""Argv and config injection (issue 18): what the user or a file hands gpuroom reaches the box as
the literal argument it was, or is refused; no shell ever runs what nobody wrote.

Every attempt tries to create a file (``~/pwned-*`` on the box, ``/tmp/gpuroom-pwned-*`` on the
jump host, which here are one machine); the attempt held when none exists afterwards and the
literal text arrived where it was meant to.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from harness.hostile import end_user_processes, gpuroom, hosts_toml

pytestmark = pytest.mark.sshd

WAIT_S = 60.0


def payloads(tag: str, where: str) -> list[str]:
    """Strings that run ``touch <where>/pwned-<tag>-N`` if any shell ever reads them."""
    p = f"{where}/pwned-{tag}"
    return [f"; touch {p}-1", f"$(touch {p}-2)", f"`touch {p}-3`", f"x\ntouch {p}-4",
            f"| touch {p}-5", f"&& touch {p}-6", f"' ; touch {p}-7 ; '", f"\" ; touch {p}-8 ; \""]


def pwned(box: Any, marker: str) -> list[str]:
    found = [str(p) for p in box.home.glob("pwned-*")]
    found += [str(p) for p in Path("/tmp").glob(f"gpuroom-pwned-{marker}*")]
    return found


def write_config(box: Any, tmp_path: Path, hosts: dict[str, dict[str, Any]]) -> Path:
    return hosts_toml(tmp_path / "hosts.toml", hosts, box.ssh_config)


@pytest.fixture
def box(sshd_box: Any) -> Any:
    yield sshd_box
    # The runner may be detached with setsid, out of reach of tmux kill-session.
    end_user_processes(sshd_box.identity.user.uid)


@pytest.mark.attack("injection", "hosts.toml ssh aliases, python and mounts holding ; $() "
                    "backticks | && quotes, newlines and a leading -o ProxyCommand: refused or "
                    "sent literally by status, probe, queue ls and pull --method openssh")
def test_config_values_never_reach_a_shell(box: Any, tmp_path: Path) -> None:
    marker = uuid.uuid4().hex[:8]
    local = f"/tmp/gpuroom-pwned-{marker}"
    hosts: dict[str, dict[str, Any]] = {
        "optssh": {"ssh": f"-oProxyCommand=touch {local}-proxy"},
        "good": {"ssh": box.alias, "mounts": [*payloads("mount", "~"), "-rf", "--help"]},
    }
    for i, bad in enumerate(payloads("alias", str(box.home))):
        hosts[f"alias{i}"] = {"ssh": bad}
    for i, bad in enumerate(payloads("python", str(box.home))):
        hosts[f"python{i}"] = {"ssh": box.alias, "python": bad}
    config = write_config(box, tmp_path, hosts)
    status = gpuroom(config, "status", "--json")
    assert "Traceback" not in status.stderr, status.stderr
    states = {h["name"]: h for h in json.loads(status.stdout)["hosts"]}
    assert states["good"]["state"] == "up", states["good"]
    # Each mount arrived as the literal path it was: reported missing, not run.
    reported = {d["path"] for d in states["good"]["snapshot"]["disks"]}
    assert set(hosts["good"]["mounts"]) <= reported, reported
    for name, host in states.items():
        if name != "good":
            assert host["state"] == "down" and host["error"], host
    assert "would be read as an option" in states["optssh"]["error"]
    assert "python must be" in states["python0"]["error"]
    for verb in (["probe", "optssh"], ["queue", "ls", "optssh"], ["queue", "ls", "alias0"],
                 ["pull", "optssh", "--method", "openssh", "--to", str(tmp_path / "p")],
                 ["pull", "alias2", "--method", "rsync", "--to", str(tmp_path / "p")],
                 ["queue", "ls", "python1"]):
        done = gpuroom(config, *verb)
        assert done.returncode not in (0, 70), (verb, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr and done.stderr.strip(), (verb, done.stderr)
    assert pwned(box, marker) == []


@pytest.mark.attack("injection", "a job's --name, --cwd, --env and argv holding ; $() backticks "
                    "| && quotes and newlines: the job sees each literally, nothing else runs")
def test_job_options_arrive_literally(box: Any, tmp_path: Path) -> None:
    config = write_config(box, tmp_path, {"box": {"ssh": box.alias}})
    bad = payloads("job", str(box.home))
    # A folder name is one path component: relative touches, run in ~ if a shell ever ran them.
    cwd = box.home / "dir ; touch pwned-cwd-1 $(touch pwned-cwd-2) `touch pwned-cwd-3` '\" x"
    shutil.rmtree(cwd, ignore_errors=True)
    cwd.mkdir()
    cwd.chmod(0o777)
    seen = box.home / "seen.json"
    seen.unlink(missing_ok=True)
    script = ("import json, os, sys; json.dump({'cwd': os.getcwd(), 'env': os.environ['X'], "
              "'argv': sys.argv[1:]}, open(sys.argv[1], 'w'))")
    add = gpuroom(config, "queue", "add", "--json", "box", "--name", "\n".join(bad),
                  "--cwd", str(cwd), "--env", f"X={''.join(bad)}", "--", "python3", "-c", script,
                  str(seen), *bad, "-rf", "--")
    assert add.returncode == 0, add.stderr
    job = json.loads(add.stdout.strip().splitlines()[-1])["job"]
    deadline = time.monotonic() + WAIT_S
    while not seen.exists():
        assert time.monotonic() < deadline, gpuroom(config, "queue", "ls", "box").stdout
        time.sleep(0.3)
    time.sleep(0.2)  # the job's json.dump closes the file as it exits
    got = json.loads(seen.read_text())
    assert got == {"cwd": str(cwd), "env": "".join(bad), "argv": [str(seen), *bad, "-rf", "--"]}
    listed = json.loads(gpuroom(config, "queue", "ls", "box", "--json").stdout)
    [mine] = [j for j in listed["jobs"] if j["id"] == job]
    assert mine["name"] == "\n".join(bad)
    assert pwned(box, "none") == [] and list(cwd.iterdir()) == []


@pytest.mark.attack("injection", "job ids holding ; $() backticks, a leading - and newlines "
                    "given to queue logs, kill and relaunch: refused as unknown jobs, nothing run")
def test_job_ids_are_never_read_by_a_shell_or_as_options(box: Any, tmp_path: Path) -> None:
    config = write_config(box, tmp_path, {"box": {"ssh": box.alias}})
    for job in payloads("id", str(box.home)):
        for verb in ("logs", "kill", "relaunch"):
            done = gpuroom(config, "queue", verb, "box", "--", job)
            assert done.returncode not in (0, 70), (verb, job, done.stdout, done.stderr)
            assert "Traceback" not in done.stderr + done.stdout, (verb, job, done.stderr)
    assert pwned(box, "none") == []


@pytest.mark.attack("injection", "a job id with a leading - (-h, --help, --offset=0) given after "
                    "-- to queue logs, kill, relaunch, show, rm and edit: the box must take it as "
                    "a job id too")
@pytest.mark.parametrize("verb", ["logs", "kill", "relaunch", "show", "rm", "edit"])
@pytest.mark.parametrize("job", ["-h", "--help", "--offset=0", "--queue=x"])
def test_a_job_id_with_a_leading_dash_is_not_an_option_on_the_box(
        box: Any, tmp_path: Path, verb: str, job: str) -> None:
    config = write_config(box, tmp_path, {"box": {"ssh": box.alias}})
    done = gpuroom(config, "queue", verb, "box", "--", job)
    said = done.stdout + done.stderr
    assert done.returncode not in (0, 70), said
    assert "usage:" not in said and job in said, said  # answered about that job, by name
    assert "Traceback" not in said, said
