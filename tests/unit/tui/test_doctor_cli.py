"""`gpuroom doctor` lists failed jobs too (issue 17 item 5), on the real helper's data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import DATA

from gpuroom.tui.cli import doctor as doctor_cli
from gpuroom.tui.cli.main import main
from gpuroom.tui.fleet.api import StaticFleet
from gpuroom.tui.model import HostState


def _failed_fleet() -> tuple[list[HostState], float]:
    data = json.loads((DATA / "scenario-failed.json").read_text())
    return StaticFleet.from_scenario(data).hosts(), float(data["now"])


@pytest.fixture
def polled(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    hosts, now = _failed_fleet()

    class Polled(StaticFleet):
        """The scenario's hosts as one poll left them (no box is reached)."""

        async def poll_all(self) -> list[HostState]:
            return self.hosts()

        async def close(self) -> None:
            pass

        async def log_tail(self, host: str, job_key: str) -> None:
            return None  # a recording has no log to read

    monkeypatch.setattr(doctor_cli, "Fleet", lambda config: Polled(hosts))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr("time.time", lambda: now)
    config = tmp_path / "hosts.toml"
    config.write_text("")
    config.chmod(0o600)
    return config


def test_doctor_json_lists_the_failed_job_and_puts_it_in_the_banner(
        polled: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["--config", str(polled), "doctor", "--json"])
    doc = json.loads(capsys.readouterr().out)
    failed = doc["failed_jobs"]
    assert failed and all("failed" in f["text"] for f in failed)
    assert failed[0]["text"] in doc["banner"]


def test_doctor_table_names_the_failed_job(polled: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one row, not the words wrapped over three
    main(["--config", str(polled), "doctor", "--json"])
    (first, *_) = json.loads(capsys.readouterr().out)["failed_jobs"]
    assert main(["--config", str(polled), "doctor"]) == 2  # a failed job is critical
    out = capsys.readouterr().out
    assert first["text"].split(": ", 1)[1][:30] in out.replace("\n", " ")


def test_help_documents_the_exit_codes_and_the_ack(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["doctor", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "0 nothing urgent, 1 warnings" in text and "2 something critical" in text
    assert "--ack HOST/JOB" in text


def test_doctor_table_says_each_critical_once_and_counts_them(
        polled: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The banner's top lines above the table repeated rows of the table below them."""
    monkeypatch.setenv("COLUMNS", "400")
    main(["--config", str(polled), "doctor", "--json"])
    (first, *_) = json.loads(capsys.readouterr().out)["failed_jobs"]
    main(["--config", str(polled), "doctor"])
    out = capsys.readouterr().out
    said = first["text"].split(": ", 1)[1]
    assert said.startswith("job ") and out.count(said) == 1, out
    assert "1 critical" in out.splitlines()[-1], out
