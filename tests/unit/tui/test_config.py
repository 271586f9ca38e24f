"""hosts.toml: bad input is a clear error naming file, place and fix; one bad host stays alone."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gpuroom.tui import config as cfg
from gpuroom.tui.cli.main import main
from gpuroom.tui.ssh_config import ssh_config_aliases


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "hosts.toml"
    p.write_text(text)
    return p


def test_missing_file_means_local_host(tmp_path: Path) -> None:
    config = cfg.load(tmp_path / "nope.toml")
    assert config.hosts == {}
    [only] = config.effective_hosts()
    assert only.name == "local" and only.local


@pytest.mark.attack("bad configuration", "a hosts.toml that is not TOML: file and line named")
def test_not_toml_names_file_and_line(tmp_path: Path) -> None:
    p = write(tmp_path, "[hosts.a]\nssh = box\n")
    with pytest.raises(cfg.ConfigError) as err:
        cfg.load(p)
    text = str(err.value)
    assert str(p) in text and "line 2" in text and "Fix:" in text


@pytest.mark.attack(
    "bad configuration",
    "one malformed host in hosts.toml: that host fails, the rest load")
def test_bad_host_is_isolated(tmp_path: Path) -> None:
    p = write(tmp_path, """
[hosts.good]
ssh = "good"
[hosts.noalias]
profile = "runpod"
[hosts.evil]
ssh = "box; rm -rf ~"
[hosts.dash]
ssh = "-oProxyCommand=touch /tmp/x"
""")
    config = cfg.load(p)
    assert config.hosts["good"].error is None
    assert "no ssh alias" in (config.hosts["noalias"].error or "")
    assert "[hosts.noalias]" in (config.hosts["noalias"].error or "")
    assert "metacharacters" in (config.hosts["evil"].error or "")
    assert "option" in (config.hosts["dash"].error or "")


@pytest.mark.attack("bad configuration", "wrongly typed hosts.toml values: each field named")
def test_wrong_types_are_named(tmp_path: Path) -> None:
    p = write(tmp_path, """
[hosts.a]
ssh = "a"
price_per_hour = "cheap"
mounts = "/workspace"
teardown_command = "runpodctl stop pod x"
""")
    err = cfg.load(p).hosts["a"].error or ""
    assert "price_per_hour" in err and "mounts" in err and "argv list" in err


@pytest.mark.attack("bad configuration", "an unknown [settings] key: an error with the fix")
def test_unknown_setting_is_fatal_with_fix(tmp_path: Path) -> None:
    p = write(tmp_path, "[settings]\npoll_every = 3\n")
    with pytest.raises(cfg.ConfigError, match=r"poll_every.*known: poll_interval_s"):
        cfg.load(p)


def test_save_roundtrip_mode_0600(tmp_path: Path) -> None:
    config = cfg.Config(path=tmp_path / "sub" / "hosts.toml")
    config.hosts["h100"] = cfg.HostConfig(name="h100", ssh="h100", profile="runpod",
                                          price_per_hour=2.5, mounts=["/workspace"])
    cfg.save(config)
    mode = stat.S_IMODE(config.path.stat().st_mode)
    assert mode == 0o600
    again = cfg.load(config.path)
    h = again.hosts["h100"]
    assert (h.ssh, h.profile, h.price_per_hour, h.mounts) == ("h100", "runpod", 2.5,
                                                               ["/workspace"])


def test_ssh_config_aliases_skip_wildcards_and_follow_include(tmp_path: Path) -> None:
    inc = tmp_path / "extra.conf"
    inc.write_text("Host lambda-a100\n  HostName 10.0.0.1\n")
    main_cfg = tmp_path / "config"
    main_cfg.write_text(f"""
Host *
  ServerAliveInterval 10
Host h100 h100-b
  HostName 1.2.3.4
Host gpu-?
  User x
Include {inc}
Host h100
""")
    assert ssh_config_aliases(main_cfg) == ["h100", "h100-b", "lambda-a100"]


def test_cli_hosts_add_list_remove_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                          ) -> None:
    p = tmp_path / "hosts.toml"
    assert main(["--config", str(p), "hosts", "add", "box", "--profile", "vastai"]) == 0
    assert main(["--config", str(p), "hosts", "add", "box"]) == 2  # duplicate
    assert main(["--config", str(p), "hosts", "add", "bad", "--ssh", "a b"]) == 2
    ssh_cfg = tmp_path / "ssh_config"
    ssh_cfg.write_text("Host alpha\n  HostName 127.0.0.1\nHost *.internal\n  User x\n")
    assert main(["--config", str(p), "hosts", "import", "--ssh-config", str(ssh_cfg)]) == 0
    capsys.readouterr()
    assert main(["--config", str(p), "hosts", "list"]) == 0
    out = capsys.readouterr().out
    assert "box\tssh box\tprofile=vastai" in out and "alpha\tssh alpha" in out
    assert main(["--config", str(p), "hosts", "remove", "box"]) == 0
    assert "box" not in cfg.load(p).hosts


@pytest.mark.attack("bad configuration", "a broken hosts.toml through the CLI: one line, exit 2")
def test_cli_config_error_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = write(tmp_path, "not = [toml")
    assert main(["--config", str(p), "status", "--json"]) == 2
    assert str(p) in capsys.readouterr().err


@pytest.mark.parametrize("verb", [[], ["status"], ["hosts", "list"], ["doctor"],
                                  ["queue", "ls", "x"], ["pull", "x"], ["gate", "x"],
                                  ["record", "out.jsonl"]])
@pytest.mark.attack(
    "bad configuration",
    "--config naming a file that does not exist: exit 2, not the local room")
def test_a_named_config_that_does_not_exist_is_an_error(
        verb: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 18: `--config /no/such/file.toml` silently opened the local room.
    missing = tmp_path / "no" / "such.toml"
    assert main(["--config", str(missing), *verb]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "no such file" in err and "--config" in err
    assert "Traceback" not in err


def test_hosts_import_may_create_the_config_it_names(tmp_path: Path) -> None:
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("Host box\n  HostName 127.0.0.1\n")
    path = tmp_path / "new.toml"
    assert main(["--config", str(path), "hosts", "import", "--ssh-config", str(ssh_config)]) == 0
    assert list(cfg.load(path, must_exist=True).hosts) == ["box"]


def test_a_hosts_file_others_can_read_is_warned_with_the_chmod_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 18: it names hosts and teardown commands, and was accepted silently.
    path = write(tmp_path, '[hosts.a]\nlocal = true\n')
    path.chmod(0o644)
    assert cfg.load(path).warnings == [
        f"{path} can be read by other users (mode 0644). Fix: chmod 600 {path}"]
    assert main(["--config", str(path), "hosts", "list"]) == 0
    assert f"warning: {path} can be read by other users" in capsys.readouterr().err
    path.chmod(0o600)
    assert cfg.load(path).warnings == []


def _ssh_config(tmp_path: Path, text: str) -> Path:
    ssh = tmp_path / "ssh_config"
    ssh.write_text(text)
    path = tmp_path / "hosts.toml"
    path.write_text(f'[settings]\nssh_config = "{ssh}"\n')
    path.chmod(0o600)
    return path


def test_hosts_add_refuses_an_unknown_profile_and_lists_the_known(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 17: `--profile runpdo` passed silently and failed later.
    path = _ssh_config(tmp_path, "Host box\n  HostName 127.0.0.1\n")
    assert main(["--config", str(path), "hosts", "add", "box", "--profile", "runpdo"]) == 2
    err = capsys.readouterr().err
    assert "unknown profile 'runpdo'" in err and "runpod" in err and "generic-ssh" in err
    assert cfg.load(path).hosts == {}


def test_hosts_add_warns_of_an_alias_the_ssh_config_lacks(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _ssh_config(tmp_path, "Host box\n  HostName 127.0.0.1\n")
    assert main(["--config", str(path), "hosts", "add", "box"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["--config", str(path), "hosts", "add", "bxo"]) == 0
    err = capsys.readouterr().err
    assert "'bxo' is not a Host in" in err and str(tmp_path / "ssh_config") in err
    assert sorted(cfg.load(path).hosts) == ["box", "bxo"]


HAND_EDITED = '''# My fleet. Prices from the provider's page, 2026-11.
[settings]
poll_interval_s = 5    # the default, written out on purpose

# --- rented ---
[hosts.h100]
ssh = "h100"            # RunPod pod 7x1
profile = "runpod"
price_per_hour = 2.49   # community cloud

[hosts.broken]
ssh = "broken"
price_per_hour = "cheap"  # wrong on purpose: gpuroom must not "fix" it away
'''


@pytest.mark.attack("bad configuration", "hosts add, import and remove on a hand-edited "
                                         "hosts.toml with comments")
def test_hosts_verbs_keep_every_comment_and_a_backup(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 18: hosts add and import dropped every comment and reformatted the file.
    path = _ssh_config(tmp_path, "Host box\n  HostName 127.0.0.1\nHost alpha\n  User a\n")
    ssh_line = path.read_text()
    path.write_text(ssh_line + HAND_EDITED.replace("[settings]\n", ""))
    path.chmod(0o600)
    before = path.read_text()
    assert main(["--config", str(path), "hosts", "add", "box", "--profile", "vastai"]) == 0
    after_add = path.read_text()
    assert after_add.startswith(before)  # every byte the user wrote, then the new table
    assert after_add[len(before):].strip() == '[hosts.box]\nssh = "box"\nprofile = "vastai"'
    backup = path.with_name("hosts.toml.bak")
    assert backup.read_text() == before
    assert stat.S_IMODE(backup.stat().st_mode) == stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "hosts.toml.bak" in capsys.readouterr().out

    assert main(["--config", str(path), "hosts", "import"]) == 0
    assert path.read_text() == after_add + '\n[hosts.alpha]\nssh = "alpha"\n'
    assert backup.read_text() == after_add
    assert main(["--config", str(path), "hosts", "remove", "alpha"]) == 0
    assert path.read_text().rstrip("\n") == after_add.rstrip("\n")  # its blank line may stay
    loaded = cfg.load(path)
    assert sorted(loaded.hosts) == ["box", "broken", "h100"]
    assert "price_per_hour" in (loaded.hosts["broken"].error or "")


@pytest.mark.attack("bad configuration", "hosts import with no ssh config")
def test_hosts_import_without_an_ssh_config_is_an_error_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 18: it said "imported 0 host(s)" and exited 0.
    path = tmp_path / "hosts.toml"
    missing = tmp_path / "no_ssh_config"
    assert main(["--config", str(path), "hosts", "import", "--ssh-config", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"{missing} does not exist" in err and "Fix:" in err and "--ssh-config" in err
    assert not path.exists()


@pytest.mark.attack("bad configuration", "a host key misspelled (price_per_hr): refused "
                    "naming file, host and line, with the key it meant")
def test_a_misspelled_host_key_is_a_config_error_that_says_the_key_it_meant(
        tmp_path: Path) -> None:
    p = write(tmp_path, '# my boxes\n[hosts.nubox]\nssh = "nubox"\nprice_per_hr = 2.5\n')
    with pytest.raises(cfg.ConfigError) as caught:
        cfg.load(p)
    assert caught.value.message == (f"{p}: [hosts.nubox] line 4: unknown key price_per_hr, "
                                 "did you mean price_per_hour")
    assert caught.value.fix == "rename it to price_per_hour"


def test_an_unknown_host_key_like_no_known_one_lists_the_known(tmp_path: Path) -> None:
    p = write(tmp_path, '[hosts.nubox]\nssh = "nubox"\nzzz = 1\n')
    with pytest.raises(cfg.ConfigError, match=r"unknown key zzz\. Fix: remove it") as caught:
        cfg.load(p)
    assert "known: accept_moves, code, cpu_training_after_min" in (caught.value.fix or "")


def test_hosts_rm_removes_one_host_keeping_comments_and_a_backup(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`queue rm` exists, so `hosts rm` was tried and refused as an invalid choice."""
    path = tmp_path / "hosts.toml"
    text = ('# my boxes\n[hosts.nubox]  # the 4090\nssh = "nubox"\n\n'
            '[hosts.old]\nssh = "old"  # returned\n')
    path.write_text(text)
    path.chmod(0o600)
    assert main(["--config", str(path), "hosts", "rm", "old"]) == 0
    assert path.read_text().rstrip("\n") == '# my boxes\n[hosts.nubox]  # the 4090\nssh = "nubox"'
    assert path.with_name("hosts.toml.bak").read_text() == text
    assert "hosts.toml.bak" in capsys.readouterr().out
    assert main(["--config", str(path), "hosts", "rm", "nubx"]) == 2
    err = capsys.readouterr().err
    assert "no host 'nubx'" in err and "did you mean nubox?" in err and "hosts add" not in err


@pytest.mark.parametrize("verb", [["queue", "ls", "nubx"], ["doctor", "nubx"],
                                  ["probe", "nubx"], ["secret", "ls", "nubx"],
                                  ["pull", "nubx"]])
def test_a_misspelled_host_says_the_host_it_meant_not_hosts_add(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: list[str]) -> None:
    path = tmp_path / "hosts.toml"
    path.write_text('[hosts.nubox]\nssh = "nubox"\n[hosts.h100]\nssh = "h100"\n')
    path.chmod(0o600)
    assert main(["--config", str(path), *verb]) == 2
    err = capsys.readouterr().err
    assert "did you mean nubox?" in err and "Fix: type nubox instead of nubx" in err, err
    assert "hosts add" not in err
