"""notify_url checked when hosts.toml loads (tui/webhook_url.py) and sent as checked: a space,
a control character or ``user:password@`` is a config error that never quotes the URL's
token; a non-ASCII path is delivered percent-encoded; a server that answers no HTTP is a
warning naming its host only; and notify_command runs whatever notify_url did.

The webhook is a real HTTP server on 127.0.0.1; notify_command is a real process."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from harness.httpserve import serving
from harness.webhook import webhook
from paths import DATA

from gpuroom.tui import config as cfg
from gpuroom.tui.cli.export import Exporter
from gpuroom.tui.cli.main import main
from gpuroom.tui.fleet.replay import load_recording
from gpuroom.tui.model import LinkState
from gpuroom.tui.webhook_url import UrlRefused, request_url, where

TOKEN = "tk-9f8e7d6c"


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """internal-errors.log, if anything wrote one, stays in this test's folder."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def _hosts(tmp_path: Path, settings: str, host: str = "a") -> Path:
    path = tmp_path / "hosts.toml"
    path.write_text(f'[settings]\n{settings}\n\n[hosts.{host}]\nssh = "x"\n')
    path.chmod(0o600)
    return path


REFUSED = {
    "a space": f"https://ntfy.sh/my {TOKEN}",
    "a tab": f"https://ntfy.sh/{TOKEN}\tx",
    "a line break": f"https://ntfy.sh/{TOKEN}\nx",
    "a C1 control": f"https://ntfy.sh/{TOKEN}\x85",
    "user:password@": f"https://gpuroom:{TOKEN}@ntfy.sh/topic",
    "a user@": f"https://{TOKEN}@ntfy.sh/topic",
}


@pytest.mark.attack("bad configuration", "notify_url with a space, a tab, a line break, a C1 "
                    "control or user:password@: a config error with its fix, exit 2, the "
                    "token in no message and no internal-errors.log")
@pytest.mark.parametrize("case", list(REFUSED))
def test_an_unsendable_notify_url_is_a_config_error_that_never_quotes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    import json

    path = _hosts(tmp_path, f"notify_url = {json.dumps(REFUSED[case])}")
    with pytest.raises(cfg.ConfigError) as err:
        cfg.load(path)
    assert "[settings] notify_url" in str(err.value) and err.value.fix, err.value
    assert TOKEN not in str(err.value)
    assert main(["--config", str(path), "status"]) == 2
    said = "".join(capsys.readouterr())
    assert "notify_url" in said and "Fix:" in said and TOKEN not in said, said
    assert not list((tmp_path / "state").rglob("internal-errors.log"))


def test_a_non_ascii_url_is_sent_percent_encoded_and_an_idn_host_in_idna() -> None:
    assert request_url("https://ntfy.sh/tópico?t=ä#x") == \
        "https://ntfy.sh/t%C3%B3pico?t=%C3%A4#x"
    assert request_url("https://bücher.example/a%20b") == \
        "https://xn--bcher-kva.example/a%20b"
    assert request_url("http://[::1]:8080/x") == "http://[::1]:8080/x"
    with pytest.raises(UrlRefused):
        request_url("ftp://ntfy.sh/x")
    assert where(f"https://u:{TOKEN}@ntfy.sh:8443/{TOKEN}") == "https://ntfy.sh:8443"
    assert where("https://ntfy.sh:99999/x") == "notify_url"


def _command(out: Path) -> str:
    """A notify_command writing its last argument (the alert line) to ``out``."""
    import json

    code = f"import sys; open({str(out)!r}, 'a').write(sys.argv[-1] + '\\n')"
    return f"notify_command = {json.dumps([sys.executable, '-c', code])}"


async def _alert_once(config: Path, tmp_path: Path) -> Exporter:
    """The exporter fed the inode_full recording: one new critical item (U7) to alert on."""
    records = load_recording(DATA / "doctor" / "inode_full.jsonl")
    host = records[0].host
    exporter = Exporter(cfg.load(config), clock=lambda: records[-1].t + 10)
    state = exporter.fleet.state(host)
    for r in records:
        state.snapshot, state.state = r.snapshot, LinkState(r.state)
        state.last_ok = state.last_try = r.t
        exporter.changed(host)
    await asyncio.wait_for(exporter.drain(), 60)
    await exporter.fleet.close()
    return exporter


@pytest.mark.attack("bad configuration", "notify_url with a non-ASCII path: delivered "
                    "percent-encoded, and notify_command runs for the same alert")
async def test_a_non_ascii_notify_url_is_delivered_and_the_command_still_runs(
        tmp_path: Path) -> None:
    host = load_recording(DATA / "doctor" / "inode_full.jsonl")[0].host
    ran = tmp_path / "command-ran"
    with webhook() as hook:
        config = _hosts(tmp_path, f'notify_url = "{hook.url}/tópico"\n{_command(ran)}', host)
        await _alert_once(config, tmp_path)
    assert hook.paths == ["/hook/secret-token/t%C3%B3pico"]
    assert [b["id"] for b in hook.bodies] == ["U7"]
    assert "U7" in ran.read_text()


@contextmanager
def not_http() -> Iterator[tuple[str, list[int]]]:
    """A server that reads each POST and answers bytes that are no HTTP status line."""
    seen: list[int] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen.append(1)
            self.wfile.write(b"garbage, not HTTP\r\n\r\n")
            self.close_connection = True

        def log_message(self, *args: Any) -> None:
            pass

    with serving(Handler) as base:
        yield f"{base}/hook/{TOKEN}", seen


@pytest.mark.attack("bad configuration", "notify_url whose server answers no HTTP: a warning "
                    "naming its host only, and notify_command still runs for that alert")
async def test_a_server_answering_garbage_skips_no_other_channel(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host = load_recording(DATA / "doctor" / "inode_full.jsonl")[0].host
    ran = tmp_path / "command-ran"
    with not_http() as (url, seen):
        config = _hosts(tmp_path, f'notify_url = "{url}"\n{_command(ran)}', host)
        await _alert_once(config, tmp_path)
    assert seen, "the POST never reached the server"
    assert "U7" in ran.read_text()
    err = capsys.readouterr().err
    assert f"notify_url {where(url)}" in err and "BadStatusLine" in err, err
    assert TOKEN not in err and "internal error" not in err, err
    assert not list((tmp_path / "state").rglob("internal-errors.log"))
