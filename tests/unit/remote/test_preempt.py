"""remote/preempt.py against a real HTTP server on 127.0.0.1 answering like each cloud's
metadata endpoint (tests/harness/metadata.py): no notice, a notice, refusals, a slow one."""

from __future__ import annotations

import calendar
import socket
import time
import urllib.error
import urllib.request

import pytest
from harness.metadata import metadata_server

from gpuroom.remote import preempt

NOW = float(calendar.timegm((2030, 1, 1, 0, 0, 0, 0, 0, 0)))


@pytest.mark.parametrize(("cloud", "left"), [("aws", 120.0), ("gcp", 30.0), ("azure", 30.0)])
def test_no_notice_then_a_notice_with_the_seconds_left(cloud: str, left: float) -> None:
    with metadata_server(cloud) as meta:
        calm = preempt.check(cloud, meta.url, now=NOW)
        assert calm["error"] is None and calm["notice"] is False, calm
        meta.notice = True
        got = preempt.check(cloud, meta.url, now=NOW)
    assert got["error"] is None and got["notice"] is True, got
    assert got["seconds_left"] == left
    assert got["action"] == ("terminate" if cloud == "aws" else "preempt")


@pytest.mark.parametrize(("cloud", "path"), [
    ("aws", "/latest/meta-data/spot/instance-action"),
    ("gcp", "/computeMetadata/v1/instance/preempted"),
    ("azure", "/metadata/scheduledevents?api-version=2020-07-01")])
def test_the_server_refuses_a_request_without_the_cloud_s_header(cloud: str, path: str) -> None:
    # The stand-in is as strict as the cloud: the checks above passed because they send it.
    with metadata_server(cloud) as meta, pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(meta.url + path, timeout=5)
    assert err.value.code in (400, 401, 403)


def test_an_unreachable_or_slow_endpoint_is_an_error_within_the_bound() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)  # accepts, never answers
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        started = time.monotonic()
        got = preempt.check("gcp", url)
        took = time.monotonic() - started
    assert got["notice"] is False and got["error"] is not None
    assert took < 5.0  # bounded (the bound itself is TIMEOUT_S; no timing claim here)
    assert preempt.check("nimbus", url)["error"].startswith("unknown cloud")


@pytest.mark.attack("bad answers", "a metadata endpoint answering garbage, a list, an action "
                    "that is not a string")
@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b'{"action": 5}'])
def test_a_garbled_aws_answer_is_an_error_not_a_notice(body: bytes) -> None:
    with metadata_server("aws") as meta:
        meta.notice, meta.garbage = True, body
        got = preempt.check("aws", meta.url, now=NOW)
    assert got["notice"] is False and got["error"], got
