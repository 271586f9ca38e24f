"""Platform profiles: the packaged facts load as written, bad files name file and field, the user
dir overrides, and `gpuroom profiles` answers with the right exit codes."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from gpuroom.profiles import (
    PACKAGED_DIR,
    DangerClock,
    Mount,
    Profile,
    ProfileError,
    UnknownProfileError,
    format_profile,
    format_profile_list,
    list_profiles,
    load_profile,
    load_profile_file,
    profile_to_dict,
    user_profile_dir,
)
from gpuroom.profiles.cli import add_cli

PLATFORMS = ["autodl", "colab", "generic-ssh", "kaggle", "kubernetes", "lambda", "paperspace",
             "runpod", "slurm", "vastai"]


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point the user config dir at an empty tmp dir so a developer's own profiles never leak in."""
    config_home = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config_home))
    return config_home


def _mount(profile: Profile, path: str | None = None, role: str | None = None) -> Mount:
    [mount] = [m for m in profile.mounts
               if (path is None or m.path == path) and (role is None or m.role == role)]
    return mount


def _clock(profile: Profile, kind: str) -> DangerClock:
    [clock] = [c for c in profile.danger_clocks if c.kind == kind]
    return clock


# --------------------------------------------------------------------------- packaged facts

def test_every_packaged_profile_loads() -> None:
    assert list_profiles() == PLATFORMS
    for name in PLATFORMS:
        profile = load_profile(name)
        assert profile.name == name and profile.origin == "packaged"
        assert profile.path == PACKAGED_DIR / f"{name}.toml"
        # Every profile has something to tell the user on first contact (principle 10).
        assert profile.surface.dangers, name


def test_generic_ssh_defaults() -> None:
    p = load_profile("generic-ssh")
    # "kind: ssh # ssh | slurm | kubernetes | notebook"
    assert p.kind == "ssh"
    # "meter_stop_verb: manual # nothing reclaims the box — a forgotten instance bills 24/7"
    assert p.meter_stop_verb == "manual"
    # "meter_stop_irreversible: true # destroying the box deletes its disk; no platform undo"
    assert p.meter_stop_irreversible is True
    # "detach_primitive: tmux"
    assert p.detach_primitive == "tmux"
    # "spot_available: false # bare box: none by default" / "spot_grace: n/a # bare: n/a"
    assert p.spot_available is False and p.spot_grace_s == "n/a"
    # "inode_cap: host-dependent # measure with df -i; do NOT assume an AutoDL ~200K constant"
    assert p.inode_cap == "host-dependent"
    for fact in (p.shared_fs, p.free_egress, p.china_mirror_needed, p.host_driver_cuda_max,
                 p.local_nvme):
        assert fact == "host-dependent"
    # "Root / home disk | / , ~ | yes (box keeps running) | **no** (destroy deletes the box)"
    root = _mount(p, "/")
    assert root.survives_stop is True and root.survives_destroy is False
    # "DURABLE_DIR=$HOME/proj"
    assert p.durable_dir == "$HOME/proj"
    # "there is usually **no auto-release / idle timer to save you**: a forgotten box
    #  **bills 24/7**"
    clock = _clock(p, "billing_while_running")
    assert clock.seconds == "none" and "24/7" in clock.text


def test_runpod() -> None:
    p = load_profile("runpod")
    # "**RunPod** wipes the *container disk* on stop; only the *volume disk* (`/workspace`)
    #  survives a stop, and only a **Network Volume** survives a terminate."
    container = _mount(p, role="container disk")
    assert container.survives_stop is False
    workspace = _mount(p, "/workspace")
    assert workspace.survives_stop is True
    assert workspace.survives_destroy is False
    assert _mount(p, role="Network Volume").survives_destroy is True
    # "on RunPod/vast/Lambda the meter-stopping action is the **irreversible**
    #  `terminate`/`destroy` that deletes the disk"
    assert p.meter_stop_verb == "terminate" and p.meter_stop_irreversible is True
    # "a stop that keeps billing (vast.ai forever, RunPod 2×)"
    assert "2×" in _clock(p, "billing_while_stopped").text
    # "The **spot/preemption** sub-case is profile-parameterized (central on vast/RunPod; ..."
    assert p.spot_available is True
    # "most GPU-clouds (Lambda/RunPod/vast/CoreWeave) charge $0"
    assert p.free_egress is True
    # The container disk has no known path, so it must not be statvfs'd.
    assert p.watch_paths() == ["/workspace"]


def test_vastai() -> None:
    p = load_profile("vastai")
    # "**vast.ai** keeps disk across a stop but **bills it forever**; a destroy loses everything."
    disk = _mount(p, role="instance disk")
    assert disk.survives_stop is True and disk.survives_destroy is False
    assert "forever" in _clock(p, "billing_while_stopped").text
    assert p.meter_stop_verb == "destroy" and p.meter_stop_irreversible is True
    # "if the provider can evict, treat it like the vast.ai profile: tiny/zero grace"
    assert p.spot_available is True and p.spot_grace_s == 0
    # "RunPod/vast/Lambda spec GB quotas with no documented inode cap"
    assert p.inode_cap == "none"


def test_autodl() -> None:
    p = load_profile("autodl")
    # "AutoDL releases a 关机 box after **15 days** → the data disk is gone"
    clock = _clock(p, "auto_release_after_stop")
    assert clock.seconds == 15 * 24 * 3600
    # "the inode-cap *number* is a profile fact (AutoDL/China enforce ~200K; ..."
    assert p.inode_cap == 200_000
    # "AutoDL persists `/root` across a power-off"
    root = _mount(p, "/root")
    assert root.survives_stop is True and root.survives_destroy is False
    # "(AutoDL pins `tensorboard --logdir /root/tf-logs`; ..."
    assert any("/root/tf-logs" in line for line in p.surface.conveniences)


def test_lambda_and_paperspace_leave_the_unstated_unknown() -> None:
    lam = load_profile("lambda")
    # "on RunPod/vast/Lambda the meter-stopping action is the **irreversible** ..."
    assert lam.meter_stop_irreversible is True
    # "on Lambda/Paperspace/China the interruption is auto-shutdown/auto-release/capacity
    #  instead": no timer values, so no clock is invented.
    assert lam.danger_clocks == () and lam.spot_available == "unknown"
    paper = load_profile("paperspace")
    assert paper.mounts == () and paper.danger_clocks == ()
    assert paper.meter_stop_verb == "unknown" and paper.durable_dir == "unknown"


def test_slurm() -> None:
    p = load_profile("slurm")
    # "The **detach primitive is the swappable plug** — tmux on a bare box, `sbatch --requeue`
    #  on Slurm"
    assert p.kind == "slurm" and p.detach_primitive == "sbatch"
    assert "--requeue" in p.detach_how
    # "each task is sent **SIGTERM, then SIGKILL after `KillWait` (default 30 s)**"
    assert p.spot_grace_s == 30
    assert _clock(p, "walltime").seconds == "per-job"
    # "node-local **`$TMPDIR` is wiped when the job ends**"; "write **checkpoints to
    #  `/scratch/$USER`**"
    assert _mount(p, "$TMPDIR").survives_stop is False
    assert _mount(p, "/scratch/$USER").survives_stop is True
    assert p.durable_dir == "/scratch/$USER/proj" and p.data_dir == "$TMPDIR"


def test_kubernetes() -> None:
    p = load_profile("kubernetes")
    # "Checkpoints **must** mount a **PersistentVolumeClaim** (or object storage) at
    #  `/checkpoints`"; "the **pod filesystem is EPHEMERAL by design.**"
    assert p.durable_dir == "/checkpoints"
    assert _mount(p, "/checkpoints").survives_stop is True
    assert _mount(p, "/").survives_stop is False
    # "`terminationGracePeriodSeconds` (**default 30 s**"
    assert p.spot_grace_s == 30 and p.detach_primitive == "k8s-job"


def test_colab_and_kaggle_session_caps() -> None:
    colab = load_profile("colab")
    # "**Idle timeout ~90 min** (no cell activity) and a hard **~12 h max VM lifetime**"
    assert _clock(colab, "session_cap").seconds == 12 * 3600
    assert _clock(colab, "idle_timeout").seconds == 90 * 60
    # "on disconnect all RAM, variables, models, and the local `/content` filesystem are **lost**"
    assert _mount(colab, "/content").survives_stop is False
    # "NB5 ... there is **no SIGTERM, no grace window** to catch"
    assert colab.spot_grace_s == 0
    kaggle = load_profile("kaggle")
    # "**interactive idle timeout ~60 min** and a **~9 h** session cap"
    assert _clock(kaggle, "session_cap").seconds == 9 * 3600
    assert _clock(kaggle, "idle_timeout").seconds == 60 * 60
    # "**30 GPU-hours/week** floating quota"
    assert _clock(kaggle, "quota").seconds == 30 * 3600
    # "**persists `/kaggle/working` (20 GB) as the committed version's output**"
    assert kaggle.detach_primitive == "kaggle-commit" and kaggle.durable_dir == "/kaggle/working"
    assert kaggle.kind == colab.kind == "notebook"


def test_every_packaged_profile_cites_a_source_for_its_mounts_and_clocks() -> None:
    for name in PLATFORMS:
        p = load_profile(name)
        assert all(m.source for m in p.mounts), name
        assert all(c.source for c in p.danger_clocks), name


# --------------------------------------------------------------------------- bad profiles

GOOD = (PACKAGED_DIR / "runpod.toml").read_text(encoding="utf-8")


def _write(directory: Path, name: str, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _error_for(path: Path) -> ProfileError:
    with pytest.raises(ProfileError) as err:
        load_profile_file(path)
    assert str(path) in str(err.value) and "Fix:" in str(err.value)
    return err.value


def test_not_toml_names_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "runpod", 'platform = "runpod"\nkind = ssh\n')
    err = _error_for(path)
    assert err.field == "line 2"
    assert "line 2" in str(err) and "not valid TOML" in str(err)


def test_unknown_key(tmp_path: Path) -> None:
    path = _write(tmp_path, "runpod", GOOD.replace('kind = "ssh"', 'kind = "ssh"\nknd = "x"'))
    err = _error_for(path)
    assert err.field == "knd" and "unknown key" in str(err) and "known:" in str(err)


def test_unknown_key_in_a_mount(tmp_path: Path) -> None:
    path = _write(tmp_path, "runpod",
                  GOOD.replace('role = "volume disk"', 'role = "volume disk"\nsurvive = true'))
    assert _error_for(path).field == "mounts[1].survive"


def test_wrong_type_in_a_nested_mount(tmp_path: Path) -> None:
    text = GOOD.replace(
        'survives_stop = true\nsurvives_destroy = false\nnote = "survives a stop only',
        'survives_stop = true\nsurvives_destroy = "yes"\nnote = "survives a stop only')
    assert text != GOOD
    path = _write(tmp_path, "runpod", text)
    err = _error_for(path)
    assert err.field == "mounts[1].survives_destroy"
    assert "'yes'" in str(err) and "true/false" in str(err)


def test_wrong_type_number_for_string(tmp_path: Path) -> None:
    path = _write(tmp_path, "runpod", GOOD.replace('durable_dir = "/workspace"', "durable_dir = 3"))
    err = _error_for(path)
    assert err.field == "durable_dir" and "an integer" in str(err)


def test_bad_enum(tmp_path: Path) -> None:
    path = _write(tmp_path, "runpod", GOOD.replace('kind = "ssh"', 'kind = "bare_ssh"'))
    err = _error_for(path)
    assert err.field == "kind" and "'bare_ssh'" in str(err)
    # The fix lists the values a profile's kind allows.
    for allowed in ("'ssh'", "'slurm'", "'kubernetes'", "'notebook'"):
        assert allowed in err.fix


def test_bad_clock_kind(tmp_path: Path) -> None:
    path = _write(tmp_path, "runpod", GOOD.replace('kind = "billing_while_stopped"',
                                                   'kind = "bills_when_stopped"'))
    assert _error_for(path).field == "danger_clocks[0].kind"


def test_missing_required_field(tmp_path: Path) -> None:
    path = _write(tmp_path, "runpod", GOOD.replace('durable_dir = "/workspace"\n', ""))
    err = _error_for(path)
    assert err.field == "durable_dir" and "missing required field" in str(err)
    assert '"unknown"' in err.fix


def test_platform_must_match_file_name(tmp_path: Path) -> None:
    path = _write(tmp_path, "mybox", GOOD)
    err = _error_for(path)
    assert err.field == "platform" and 'platform = "mybox"' in err.fix


def test_sources_must_name_a_field(tmp_path: Path) -> None:
    path = _write(tmp_path, "runpod", GOOD + '\n"mounts[7].path" = "nowhere"\n')
    assert _error_for(path).field == "sources.mounts[7].path"


# --------------------------------------------------------------------------- user override

def test_user_profile_overrides_packaged(_isolated_config: Path) -> None:
    user_dir = user_profile_dir()
    assert user_dir == _isolated_config / "gpuroom" / "profiles"
    _write(user_dir, "runpod", GOOD.replace('durable_dir = "/workspace"',
                                            'durable_dir = "/runpod-volume"'))
    p = load_profile("runpod")
    assert p.origin == "user" and p.durable_dir == "/runpod-volume"
    assert p.path == user_dir / "runpod.toml"


def test_user_profile_adds_a_platform(tmp_path: Path) -> None:
    user_dir = tmp_path / "mine"
    _write(user_dir, "mybox", GOOD.replace('platform = "runpod"', 'platform = "mybox"'))
    assert "mybox" in list_profiles(user_dir)
    assert load_profile("mybox", user_dir).origin == "user"
    # Without the user dir it does not exist.
    with pytest.raises(UnknownProfileError):
        load_profile("mybox")


def test_unknown_and_hostile_names() -> None:
    for name in ("nope", "../generic-ssh", ""):
        with pytest.raises(UnknownProfileError) as err:
            load_profile(name)
        assert err.value.known == PLATFORMS


# --------------------------------------------------------------------------- rendering

def test_format_profile_shows_survival_matrix_and_surface() -> None:
    text = format_profile(load_profile("runpod"))
    [row] = [line for line in text.splitlines() if line.strip().startswith("/workspace")]
    assert row.split()[:5] == ["/workspace", "volume", "disk", "survives", "LOST"]
    assert "terminate the pod" in text
    assert "Surface to the user" in text and "RunPod 2×" in text
    # Sources are shown, citing ids docs/GOTCHAS.md explains.
    assert "Sources (ids: docs/GOTCHAS.md)" in text
    [source] = [line for line in text.splitlines() if line.strip().startswith("mounts[0]")]
    assert source.split(None, 1)[1] == "principle 4: a stop wipes the container disk"


def test_format_profile_without_mounts_says_so() -> None:
    text = format_profile(load_profile("paperspace"))
    assert "no mounts known" in text and "(none known for this platform)" in text


def test_format_profile_list() -> None:
    text = format_profile_list([load_profile(n) for n in PLATFORMS])
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["NAME", "KIND"] and len(lines) == 1 + len(PLATFORMS)
    [autodl] = [line for line in lines if line.startswith("autodl ")]
    assert "auto-release after stop 15 d" in autodl
    [colab] = [line for line in lines if line.startswith("colab ")]
    assert "session cap ~12 h" in colab
    assert format_profile_list([]) == "no profiles"


def test_profile_to_dict_is_json() -> None:
    data = json.loads(json.dumps(profile_to_dict(load_profile("autodl")), ensure_ascii=False))
    assert data["inode_cap"] == 200_000 and data["watch_paths"] == ["/root"]
    assert data["danger_clocks"][0]["seconds"] == 1296000


# --------------------------------------------------------------------------- CLI

def _run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom")
    add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_list(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["profiles"]) == 0
    out = capsys.readouterr().out
    for name in PLATFORMS:
        assert f"\n{name} " in out


def test_cli_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["profiles", "show", "vastai"]) == 0
    out = capsys.readouterr().out
    assert "Survival matrix" in out and "forever" in out


def test_cli_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["profiles", "show", "slurm", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["detach_primitive"] == "sbatch" and data["platform"] == "slurm"


def test_cli_show_unknown_lists_known(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(["profiles", "show", "nope"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "unknown profile 'nope'" in captured.err and "generic-ssh, kaggle" in captured.err


def test_cli_broken_user_profile_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    _write(user_profile_dir(), "runpod", GOOD.replace('kind = "ssh"', 'kind = "bare_ssh"'))
    assert _run(["profiles", "show", "runpod"]) == 2
    assert "runpod.toml: kind:" in capsys.readouterr().err
    # The list still shows every other profile, and says which file is broken.
    assert _run(["profiles"]) == 2
    captured = capsys.readouterr()
    assert "\nvastai " in captured.out and "\nrunpod " not in captured.out
    assert "runpod.toml" in captured.err
