"""`gpuroom hosts add --profile X` says the profile's dangers to know up front (principle 10)
when the host is added, not only on `gpuroom profiles show X`."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuroom.profiles import load_profile
from gpuroom.tui.cli.main import main


def test_adding_an_autodl_host_prints_its_dangers(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "hosts.toml"
    assert main(["--config", str(config), "hosts", "add", "a1", "--profile", "autodl"]) == 0
    out = capsys.readouterr().out
    dangers = load_profile("autodl").surface.dangers
    assert dangers
    for line in dangers:
        assert f"! {line}" in out
    assert "released after 15 days" in out


def test_a_profile_with_no_dangers_adds_quietly(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "hosts.toml"
    assert main(["--config", str(config), "hosts", "add", "b1", "--profile",
                 "generic-ssh"]) == 0
    out = capsys.readouterr().out
    assert ("! " in out) == bool(load_profile("generic-ssh").surface.dangers)
