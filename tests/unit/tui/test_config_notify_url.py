"""[settings] notify_url and renotify_s: read, and a bad value named with its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuroom.tui import config as cfg


def _load(tmp_path: Path, settings: str) -> cfg.Config:
    path = tmp_path / "hosts.toml"
    path.write_text(f"[settings]\n{settings}\n")
    return cfg.load(path)


def test_notify_url_and_renotify_s_are_read(tmp_path: Path) -> None:
    s = _load(tmp_path, 'notify_url = "https://ntfy.sh/t"\nrenotify_s = 600').settings
    assert (s.notify_url, s.renotify_s) == ("https://ntfy.sh/t", 600.0)
    assert cfg.Settings().renotify_s == 3600.0


@pytest.mark.attack("bad configuration", "notify_url is a file: URL or has no host")
@pytest.mark.parametrize("value", ['"file:///etc/passwd"', '"ntfy.sh/topic"', "3",
                                   '"http://h:99999/x"'])
def test_a_bad_notify_url_is_a_config_error_with_a_fix(tmp_path: Path, value: str) -> None:
    with pytest.raises(cfg.ConfigError) as err:
        _load(tmp_path, f"notify_url = {value}")
    assert "[settings] notify_url" in str(err.value)
    assert "ntfy.sh" in (err.value.fix or "")


def test_hosts_add_keeps_notify_url_and_renotify_s(tmp_path: Path) -> None:
    config = _load(tmp_path, '# mine\nnotify_url = "https://ntfy.sh/t"\nrenotify_s = 600')
    config.hosts["b"] = cfg.HostConfig(name="b", ssh="b")
    cfg.save(config)
    again = cfg.load(config.path)
    assert (again.settings.notify_url, again.settings.renotify_s) == ("https://ntfy.sh/t", 600.0)
    assert "# mine" in config.path.read_text()
