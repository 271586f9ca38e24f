"""The Host and Origin rules of gpuroom's own HTTP servers (tui/transport/http_guard.py)."""

from __future__ import annotations

import pytest

from gpuroom.tui.transport.http_guard import HostRule

LOOPBACK = HostRule.for_bind("127.0.0.1", 8000)


@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "LocalHost:8000",
                                  "[::1]:8000"])
def test_a_loopback_server_answers_under_each_loopback_name(host: str) -> None:
    assert LOOPBACK.refusal(host, None) is None
    assert LOOPBACK.refusal(host, f"http://{host}") is None


@pytest.mark.attack("trust", "Host headers that hide a foreign name or port: rebinding names, "
                             "userinfo, a trailing dot, another port, none at all")
@pytest.mark.parametrize("host", [
    "evil.example:8000", "127.0.0.1.nip.io:8000", "evil@127.0.0.1:8000", "localhost.:8000",
    "127.0.0.1:8001", "127.0.0.1", "127.0.0.1:8000/x", "127.0.0.1:8000 evil", "[::1]", "",
    None, "0x7f000001:8000", "127.1:8000"])
def test_a_foreign_host_is_refused(host: str | None) -> None:
    assert LOOPBACK.refusal(host, None) is not None


@pytest.mark.attack("trust", "Origin headers of another site, scheme or port, or opaque")
@pytest.mark.parametrize("origin", ["http://evil.example", "http://localhost:8000",
                                    "https://127.0.0.1:8000", "http://127.0.0.1:8001", "null",
                                    "http://127.0.0.1:8000/", ""])
def test_an_origin_other_than_the_host_is_refused(origin: str) -> None:
    assert LOOPBACK.refusal("127.0.0.1:8000", origin) is not None


def test_port_80_is_the_one_browsers_leave_out() -> None:
    rule = HostRule.for_bind("127.0.0.1", 80)
    assert rule.refusal("127.0.0.1", "http://127.0.0.1") is None
    assert rule.refusal("127.0.0.1:80", None) is None


def test_a_remote_bind_answers_only_under_its_own_address() -> None:
    rule = HostRule.for_bind("10.1.2.3", 9108)
    assert rule.refusal("10.1.2.3:9108", None) is None
    assert rule.refusal("localhost:9108", None) is not None
    assert rule.refusal("gpu.example:9108", None) is not None


def test_a_wildcard_bind_answers_under_ip_literals_but_no_foreign_name() -> None:
    rule = HostRule.for_bind("0.0.0.0", 9108)
    assert rule.refusal("10.1.2.3:9108", None) is None
    assert rule.refusal("localhost:9108", None) is None
    assert rule.refusal("evil.example:9108", None) is not None
