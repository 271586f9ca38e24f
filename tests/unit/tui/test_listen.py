"""--listen of export and web: loopback by default, anything else only with --allow-remote
and then said."""

from __future__ import annotations

import pytest

from gpuroom.tui.cli.listen import ListenError, parse_listen, remote_notice


def test_loopback_addresses_are_taken() -> None:
    assert parse_listen("127.0.0.1:9108", allow_remote=False) == ("127.0.0.1", 9108)
    assert parse_listen("[::1]:0", allow_remote=False) == ("::1", 0)
    assert parse_listen("localhost:8000", allow_remote=False) == ("localhost", 8000)
    assert remote_notice("127.0.0.1") is None


@pytest.mark.attack("bad configuration", "--listen 0.0.0.0 with no flag: the fleet on the LAN")
def test_any_other_address_needs_the_flag_and_is_said() -> None:
    with pytest.raises(ListenError) as err:
        parse_listen("0.0.0.0:9108", allow_remote=False)
    assert err.value.exit_code == 2 and "--allow-remote" in (err.value.fix or "")
    assert parse_listen("0.0.0.0:9108", allow_remote=True) == ("0.0.0.0", 9108)
    assert "reachable from other machines" in (remote_notice("0.0.0.0") or "")


@pytest.mark.parametrize("text", ["9108", "host:99999", "example.com:80", ":80", "1.2.3.4:x"])
def test_a_bad_listen_is_a_usage_error_with_an_example(text: str) -> None:
    with pytest.raises(ListenError) as err:
        parse_listen(text, allow_remote=True)
    assert "--listen" in str(err.value) and "127.0.0.1" in (err.value.fix or "")
