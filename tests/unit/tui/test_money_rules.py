"""Issue 19 items 1-4 and 8: the findings that cost money, each firing on its evidence and
quiet without it (positive and negative).

Snapshots are the committed recordings of the real helper (tests/data/doctor/parts.py), a
value varied where a rule needs it. Keys the helper writes since issue 19 (a log's mtime, a
job's CPU seconds, the runner's reboot hook) are not in those recordings yet: ``writes`` sets
them, and tests/system/test_snapshot_schema.py checks the real helper over sshd writes them.
Kernel events are the kernel parser's own output on the dmesg captures.
"""

from __future__ import annotations

import copy
import sys
from typing import Any

import pytest
from fakes import capture
from paths import DATA

sys.path.insert(0, str(DATA / "doctor"))
import parts as rec

from gpuroom.profiles import load_profile
from gpuroom.remote.kernel import parse_kernel_log
from gpuroom.tui.model import HostState, LinkState
from gpuroom.tui.rules.clock import IdleTracker, host_clocks, is_idle
from gpuroom.tui.rules.doctor import diagnose
from gpuroom.tui.rules.finding import Finding
from gpuroom.tui.rules.money import Recall
from gpuroom.tui.rules.watch import FleetWatch
from gpuroom.tui.snapshot import read_optional as view

T = rec.T0
MIN = 60.0
RUNPOD = load_profile("runpod")
GENERIC = load_profile("generic-ssh")
SLURM = load_profile("slurm")


def writes(job: dict[str, Any], *, log_mtime: float | None = None,
           cpu_s: float | None = None) -> dict[str, Any]:
    """``job`` with the keys the helper writes since issue 19 (see the module docstring)."""
    job = copy.deepcopy(job)
    if "log_chunk" in job:
        job["log_chunk"]["mtime"] = log_mtime
    job["cpu_s"] = cpu_s
    return job


def found(prev: dict[str, Any] | None, snap: dict[str, Any], fid: str, *,
          profile: Any = None, **kw: Any) -> list[Finding]:
    out = diagnose(view(prev), view(snap), LinkState.UP, profile, T + 10, host="h", **kw)
    return [f for f in out if f.id == fid]


# ------------------------------------------------------------------------- item 1: U16 stall

def _quiet_job(quiet_s: float, *, cpu_s: float | None = None,
               log_mtime: float | None = None) -> dict[str, Any]:
    """j1 running for 2 h whose log and checkpoint last moved ``quiet_s`` before T."""
    last = T - quiet_s
    j = rec.job(start=T - 2 * 3600, ckpt={"path": "/w/ckpt/latest.pt", "size": 2.0,
                                          "mtime": last})
    return writes(j, log_mtime=last if log_mtime is None else log_mtime, cpu_s=cpu_s)


def _idle_h100() -> dict[str, Any]:
    return rec.h100(0, power=60.0, util=0.0)  # 60 of 700 W: idle power


def test_a_hung_job_on_idle_gpus_is_a_stall_with_the_money_burnt() -> None:
    snap = rec.snapshot(T, gpus=[_idle_h100()], jobs=[_quiet_job(25 * MIN)])
    (f,) = found(None, snap, "U16", price_per_hour=2.49)
    assert f.severity == "warn" and "stalled while billing" in f.title
    assert "no log or checkpoint write for 25 min" in f.seen and "$1.04 burnt" in f.seen
    later = rec.snapshot(T, gpus=[_idle_h100()], jobs=[_quiet_job(70 * MIN)])
    assert [g.severity for g in found(None, later, "U16")] == ["critical"]


def test_no_stall_while_the_log_moves_the_gpu_works_or_below_the_threshold() -> None:
    # A long evaluation: checkpoint old, log written a minute ago.
    evaluating = _quiet_job(40 * MIN, log_mtime=T - MIN)
    assert found(None, rec.snapshot(T, gpus=[_idle_h100()], jobs=[evaluating]), "U16") == []
    # The GPU draws 259 of 700 W (the capture): working, whatever the log says.
    busy = rec.snapshot(T, gpus=[rec.h100(0)], jobs=[_quiet_job(40 * MIN)])
    assert found(None, busy, "U16") == []
    # The host's own threshold (hosts.toml stall_after_min = 45) is not reached yet.
    snap = rec.snapshot(T, gpus=[_idle_h100()], jobs=[_quiet_job(40 * MIN)])
    assert found(None, snap, "U16", stall_after_s=45 * MIN) == []
    assert len(found(None, snap, "U16")) == 1


def test_a_busy_cpu_job_is_not_a_stall_but_a_flat_one_is() -> None:
    prev = rec.snapshot(T - 60, jobs=[_quiet_job(40 * MIN - 60, cpu_s=1000.0)])
    busy = rec.snapshot(T, jobs=[_quiet_job(40 * MIN, cpu_s=1058.0)])  # ~1 core
    assert found(prev, busy, "U16") == []
    flat = rec.snapshot(T, jobs=[_quiet_job(40 * MIN, cpu_s=1000.2)])
    (f,) = found(prev, flat, "U16")
    assert "CPU 0.00 cores" in f.seen
    # One poll of a GPU-less job cannot tell a busy CPU job from a hung one: nothing said.
    assert found(None, flat, "U16") == []


def test_a_stall_counts_in_the_idle_clock_from_when_it_began() -> None:
    snap = view(rec.snapshot(T, gpus=[_idle_h100()], jobs=[_quiet_job(40 * MIN)]))
    assert snap is not None and is_idle(snap)
    tracker = IdleTracker()
    tracker.feed("h", snap, T)
    clocks = host_clocks("h", snap, None, T, price_per_hour=2.49, tracker=tracker)
    (idle,) = [c for c in clocks if c.kind == "idle"]
    assert idle.seconds == 40 * MIN and idle.severity == "warn"
    assert "a running job stalled" in idle.text and "$1.66 burnt" in idle.text
    working = view(rec.snapshot(T, gpus=[_idle_h100()], jobs=[_quiet_job(5 * MIN)]))
    assert working is not None and not is_idle(working)


# ------------------------------------------------------------------------- item 2: U31

def test_a_gpu_rental_with_no_gpu_is_critical() -> None:
    snap = rec.snapshot(T)
    snap["gpu_error"] = "NVML: Driver Not Loaded; no nvidia-smi on PATH"
    (f,) = found(None, snap, "U31", profile=RUNPOD)
    assert f.severity == "critical" and "Driver Not Loaded" in f.seen
    assert len(found(None, snap, "U31", profile=GENERIC, price_per_hour=1.2)) == 1
    # A generic box with no price may be a CPU server; a Slurm login node has no GPU.
    assert found(None, snap, "U31", profile=GENERIC) == []
    assert found(None, snap, "U31", profile=SLURM, price_per_hour=1.2) == []
    assert found(None, rec.snapshot(T, gpus=[rec.h100(0)]), "U31", profile=RUNPOD) == []


def _gpu_job(start: float, log_size: int) -> dict[str, Any]:
    j = rec.job(start=start, log_size=log_size, gpus=1)
    j["attempts"][-1]["gpus"] = [0]
    return j


def test_a_gpu_job_with_no_process_on_its_idle_gpu_trains_on_the_cpu() -> None:
    empty = rec.vary(_idle_h100(), processes=[])
    prev = rec.snapshot(T - 10, gpus=[empty], jobs=[_gpu_job(T - 10 * MIN, 4096)])
    snap = rec.snapshot(T, gpus=[empty], jobs=[_gpu_job(T - 10 * MIN, 8192)])
    (f,) = found(prev, snap, "U31")
    assert f.severity == "critical" and "trains on the CPU" in f.title
    assert "no compute process on GPU 0" in f.seen
    assert found(prev, snap, "U38") == []  # not the info "CPU-data-bound" any more


def test_no_cpu_training_with_a_process_on_the_gpu_or_early_in_the_run() -> None:
    held = _idle_h100()  # the capture's process 3375095 holds the card
    prev = rec.snapshot(T - 10, gpus=[held], jobs=[_gpu_job(T - 10 * MIN, 4096)])
    snap = rec.snapshot(T, gpus=[held], jobs=[_gpu_job(T - 10 * MIN, 8192)])
    assert found(prev, snap, "U31") == []
    assert {f.id for f in diagnose(view(prev), view(snap), LinkState.UP, None, T,
                                   host="h")} == {"U38"}
    empty = rec.vary(_idle_h100(), processes=[])
    early = rec.snapshot(T, gpus=[empty], jobs=[_gpu_job(T - 2 * MIN, 8192)])
    assert found(None, early, "U31") == []


def test_a_desktops_display_processes_do_not_hide_cpu_training() -> None:
    # Xorg and gnome-shell (type G, as fixtures/nvsmi_table/driver460-gtx1080-with-processes
    # lists them) hold the card of a desktop box whatever the job does.
    held = _idle_h100()
    (proc,) = held["processes"][:1]
    desktop = rec.vary(held, processes=[rec.vary(dict(proc), pid=1335, type="G",
                                                  name="/usr/libexec/Xorg")])
    snap = rec.snapshot(T, gpus=[desktop], jobs=[_gpu_job(T - 10 * MIN, 8192)])
    (f,) = found(None, snap, "U31")
    assert f.severity == "critical" and "no compute process on GPU 0" in f.seen


def test_the_cpu_training_window_is_the_hosts_own() -> None:
    empty = rec.vary(_idle_h100(), processes=[])
    early = rec.snapshot(T, gpus=[empty], jobs=[_gpu_job(T - 2 * MIN, 8192)])
    # hosts.toml cpu_training_after_min = 1: two minutes with no process is enough.
    (f,) = found(None, early, "U31", cpu_training_after_s=1 * MIN)
    assert f.severity == "critical" and "running 2 min" in f.seen
    late = rec.snapshot(T, gpus=[empty], jobs=[_gpu_job(T - 10 * MIN, 8192)])
    assert found(None, late, "U31", cpu_training_after_s=15 * MIN) == []


def test_hosts_toml_sets_the_cpu_training_window_per_host(tmp_path: Any) -> None:
    from gpuroom.tui.config import load

    path = tmp_path / "hosts.toml"
    path.write_text('[hosts.a]\nssh = "a"\ncpu_training_after_min = 2.5\n'
                    '[hosts.b]\nssh = "b"\ncpu_training_after_min = 0\n[hosts.c]\nssh = "c"\n')
    hosts = load(path).hosts
    assert hosts["a"].cpu_training_after_s == 150.0 and hosts["a"].error is None
    assert hosts["b"].error is not None
    assert "cpu_training_after_min must be a number" in hosts["b"].error
    assert hosts["c"].cpu_training_after_s is None  # the default, 5 min, applies


# ------------------------------------------------------------------------- item 3: U22

def _events(rel: str) -> list[dict[str, Any]]:
    return parse_kernel_log(capture(rel))


def test_a_dead_gpu_xid_is_critical_with_no_job_running() -> None:
    # gpud's kmsg capture: Xid 94 (contained ECC) among 144/145/149.
    events = _events("dmesg_xid/gpud1174-1160-kmsg-xid144-145-149-94.txt")
    (f,) = found(None, rec.snapshot(T, gpus=[rec.h100(0)], events=events), "U22")
    assert f.severity == "critical" and "Xid 94" in f.title and "dead or dying" in f.title
    assert "re-rent" in f.fix
    # Xid 13 / 109 (an application's fault) is not a dead GPU.
    benign = _events("dmesg_xid/gpud46-dmesg-ctime-xid13-xid109.txt")
    assert found(None, rec.snapshot(T, gpus=[rec.h100(0)], events=benign), "U22") == []


def test_rising_uncorrected_ecc_or_fewer_gpus_is_a_dying_gpu() -> None:
    prev = rec.snapshot(T - 5, gpus=[rec.h100(0), rec.h100(1)])
    worse = rec.snapshot(T, gpus=[rec.h100(0), rec.vary(rec.h100(1),
                                                         ecc_volatile_uncorrected=2)])
    (f,) = found(prev, worse, "U22")
    assert "GPU 1" in f.title and "0 -> 2" in f.seen
    assert found(prev, prev, "U22") == []
    # Another boot resets the volatile counter: no comparison across it.
    assert found(rec.snapshot(T - 5, gpus=[rec.h100(0), rec.h100(1)], boot_id="0" * 36),
                 worse, "U22") == []
    fewer = rec.snapshot(T, gpus=[rec.h100(0)])
    (g,) = found(prev, fewer, "U22", recall=Recall((), 2))
    assert "1 GPU(s) gone" in g.title and "1 GPU(s) now, 2 earlier" in g.seen


def test_an_xid_one_poll_before_the_death_still_explains_it() -> None:
    events = _events("dmesg_xid/gpud1174-1160-kmsg-xid144-145-149-94.txt")
    watch = FleetWatch()
    running = rec.job()
    polls = [rec.snapshot(T, gpus=[rec.h100(0)], jobs=[running], events=events),
             rec.snapshot(T + 5, gpus=[rec.h100(0)],
                          jobs=[rec.ended(running, "failed", T + 4, signal="SIGKILL")])]
    for i, raw in enumerate(polls):
        h = HostState(name="h", state=LinkState.UP, snapshot=raw, last_ok=T + 5 * i,
                      last_try=T + 5 * i)
        watch.observe(h, T + 5 * i)
    died = [f for f in watch.findings("h") if f.id == "U22" and "died" in f.title]
    assert died and "Xid 94" in died[0].title
    # Without the window the second poll alone has no kernel line: the ladder says signal.
    alone = diagnose(view(polls[0]), view(polls[1]), LinkState.UP, None, T + 5, host="h",
                     recall=Recall())
    assert not any(f.id == "U22" for f in alone)


# ------------------------------------------------------------------------- item 4: GEN6

def test_a_running_attempt_from_another_boot_is_said_at_every_poll() -> None:
    after = rec.snapshot(T, jobs=[rec.job()], boot_id="b" * 36)  # a room opened after it
    (f,) = [f for f in found(None, after, "GEN6") if f.severity == "critical"]
    assert "not running: the box rebooted" in f.title and "bbbbbbbb" in f.seen
    assert [f for f in found(None, rec.snapshot(T, jobs=[rec.job()]), "GEN6")] == []


def _runner(snap: dict[str, Any], *, alive: bool, hook: bool) -> dict[str, Any]:
    for q in snap["queue"]["queues"].values():
        q["runner"]["alive"] = alive
        q["runner"]["reboot_hook"] = hook
    return snap


def test_a_dead_runner_with_jobs_waiting_is_a_finding() -> None:
    queued = rec.job(state="queued")
    dead = _runner(rec.snapshot(T, jobs=[queued]), alive=False, hook=True)
    (f,) = found(None, dead, "GEN6")
    assert f.severity == "warn" and "runner is dead" in f.title and "j1" in f.seen
    alive = _runner(rec.snapshot(T, jobs=[queued]), alive=True, hook=True)
    assert found(None, alive, "GEN6") == []
    done = _runner(rec.snapshot(T, jobs=[rec.ended(rec.job(), "succeeded", T)]),
                   alive=False, hook=True)
    assert found(None, done, "GEN6") == []  # nothing left to run: an exited runner is fine


def test_the_doctor_asks_for_a_boot_hook_where_the_box_survives_a_reboot() -> None:
    snap = _runner(rec.snapshot(T, jobs=[rec.job()]), alive=True, hook=False)
    (f,) = found(None, snap, "GEN6", profile=GENERIC)
    assert f.severity == "info" and "gpuroom queue boot-hook h installs" in f.fix
    hooked = _runner(rec.snapshot(T, jobs=[rec.job()]), alive=True, hook=True)
    assert found(None, hooked, "GEN6", profile=GENERIC) == []
    assert found(None, snap, "GEN6", profile=load_profile("colab")) == []


# ------------------------------------------------------------------------- item 8: log bytes

def _logged(text: bytes, **env: str) -> dict[str, Any]:
    import base64

    j = rec.job(env=env) if env else rec.job()
    j["log_chunk"]["data_b64"] = base64.b64encode(text).decode()
    return rec.snapshot(T, gpus=[rec.h100(0)], jobs=[j])


OOM = (b"  File \"train.py\", line 88, in step\n"
       b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
       b"total capacity of 79.10 GiB of which 1.12 GiB is free.\n")


def test_the_log_bytes_name_oom_driver_tracker_and_crlf() -> None:
    (oom,) = found(None, _logged(OOM), "U10")
    assert oom.severity == "critical" and "CUDA out of memory" in oom.seen
    driver = _logged(b"RuntimeError: CUDA error: no kernel image is available for execution "
                     b"on the device\n")
    assert [f.severity for f in found(None, driver, "U28")] == ["critical"]
    (crlf,) = found(None, _logged(b"run.sh: line 2: $'\\r': command not found\n"), "U26")
    assert "sed -i" in crlf.fix
    wandb = _logged(b"wandb: ERROR api_key not configured (no-tty). call wandb.login(key=...)\n")
    assert len(found(None, wandb, "U35")) == 1
    assert len(found(None, _logged(b"step 1\n", WANDB_MODE="offline"), "U35")) == 1
    with_key = _logged(b"step 1\n", WANDB_MODE="offline", WANDB_API_KEY="k")
    assert found(None, with_key, "U35") == []


def test_a_clean_log_says_nothing() -> None:
    out = diagnose(None, view(_logged(b"step 10 loss 0.93\nsaved ckpt\n")), LinkState.UP,
                   None, T, host="h")
    assert [f.id for f in out] == []


def test_a_log_finding_stays_on_screen_after_its_poll() -> None:
    watch = FleetWatch()
    first, second = _logged(OOM), rec.snapshot(T + 5, gpus=[rec.h100(0)], jobs=[rec.job()])
    for i, raw in enumerate((first, second)):
        watch.observe(HostState(name="h", state=LinkState.UP, snapshot=raw, last_ok=T + i,
                                last_try=T + i), T + i)
    assert [f.id for f in watch.findings("h") if f.id == "U10"] == ["U10"]


def test_hosts_toml_sets_the_stall_threshold_per_host(tmp_path: Any) -> None:
    from gpuroom.tui.config import load

    path = tmp_path / "hosts.toml"
    path.write_text('[hosts.a]\nssh = "a"\nstall_after_min = 45\n'
                    '[hosts.b]\nssh = "b"\nstall_after_min = "soon"\n[hosts.c]\nssh = "c"\n')
    hosts = load(path).hosts
    assert hosts["a"].stall_after_s == 45 * MIN and hosts["a"].error is None
    assert hosts["b"].error is not None and "stall_after_min must be a number" in hosts["b"].error
    assert hosts["c"].stall_after_s is None  # the default, 20 min, applies


@pytest.mark.attack("hostile text", "a job prints terminal escapes and a carriage return "
                    "around 'CUDA out of memory': the finding quotes the line as inert text")
def test_a_hostile_log_line_is_quoted_inert() -> None:
    hostile = (b"\x1b]0;pwned\x07\x1b[2J\x1b[31mtorch.OutOfMemoryError: CUDA out of memory"
               b"\x1b[0m\rX\n")
    (f,) = found(None, _logged(hostile), "U10")
    assert "CUDA out of memory" in f.seen
    assert not any(ch in f.seen for ch in ("\x1b", "\x07", "\r", "\n"))


@pytest.mark.attack("hostile text", "a forged queue event gives a running attempt a boot id "
                    "and a job name carrying OSC 52 and CSI 2J: the reboot finding and the "
                    "doctor's table show them as inert text")
def test_a_forged_boot_id_and_name_reach_the_doctor_inert(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuroom.tui.cli.doctor import _print

    monkeypatch.setenv("COLUMNS", "300")  # the finding in one table row, not wrapped over two

    j = rec.job(name="\x1b]52;c;cHduZWQ=\x07\x1b[2Jtrain")
    j["attempts"][-1]["boot_id"] = "\x1b]52;c;cHduZWQ=\x07\x1b[2J-" + "0" * 20
    (f,) = [f for f in found(None, rec.snapshot(T, jobs=[j]), "GEN6")
            if f.severity == "critical"]
    assert "the box rebooted" in f.title
    for text in (f.title, f.seen):
        assert not any(ch in text for ch in ("\x1b", "\x07")), repr(text)
    _print([f], [], [])
    out = capsys.readouterr().out
    assert "the box rebooted" in out and "\x1b]52" not in out and "\x1b[2J" not in out
