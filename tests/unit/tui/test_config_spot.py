"""hosts.toml ``spot = "aws"``: the host is a spot box of that cloud (U45)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuroom.tui import config as cfg


def _host(tmp_path: Path, spot: str) -> cfg.HostConfig:
    path = tmp_path / "hosts.toml"
    path.write_text(f'[hosts.s]\nssh = "s"\nspot = {spot}\n')
    return cfg.load(path).hosts["s"]


def test_a_spot_cloud_is_read_and_written_back(tmp_path: Path) -> None:
    host = _host(tmp_path, '"gcp"')
    assert host.error is None and host.spot == "gcp"
    assert host.to_toml()["spot"] == "gcp"
    assert cfg.HostConfig(name="x", ssh="x").to_toml().get("spot") is None


@pytest.mark.attack("bad configuration", "spot = true, spot = \"ibm\": not a cloud gpuroom asks")
@pytest.mark.parametrize("value", ["true", '"ibm"', "1"])
def test_a_spot_value_that_names_no_cloud_is_this_host_s_error(tmp_path: Path,
                                                               value: str) -> None:
    host = _host(tmp_path, value)
    assert host.error is not None
    assert "spot must name the cloud: one of aws, gcp, gcp-preemptible, azure" in host.error
