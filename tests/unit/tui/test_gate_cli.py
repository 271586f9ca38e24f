"""`gpuroom gate`: its exit codes are in --help, and an unreachable host says 3 (issue 17)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuroom.tui.cli import pull as pull_cli
from gpuroom.tui.cli.main import main
from gpuroom.tui.transport.link import HostLink, LinkError, RemoteFileError


@pytest.fixture
def config(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text("[hosts.box]\nlocal = true\n")
    path.chmod(0o600)
    return path


def test_gate_help_names_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["gate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for code in ("0 safe to stop paying", "5 not safe", "3 the host did not answer",
                 "1 the check failed", "2 usage or config"):
        assert code in out


@pytest.mark.parametrize(("error", "code"), [
    (LinkError("box", "cannot connect to 'box': timed out"), 3),
    (RemoteFileError("box", "pulls.json vanished"), 1),
])
def test_gate_on_a_box_it_cannot_check(config: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str],
                                       error: LinkError, code: int) -> None:
    async def fail(link: HostLink, mounts: object = ()) -> None:
        raise error

    monkeypatch.setattr(pull_cli, "check_gate", fail)
    assert main(["--config", str(config), "gate", "box"]) == code
    assert "gpuroom gate: box: " in capsys.readouterr().err
