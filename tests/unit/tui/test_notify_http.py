"""notify_url's poster against a real HTTP server on 127.0.0.1: the JSON body, the retries
and their bound, a refusal not retried, and a URL token never shown in an error."""

from __future__ import annotations

import asyncio
import socket

import pytest
from harness.webhook import webhook

from gpuroom.tui.transport.notify_http import NotifyError, UrlNotifier, post_alert

ALERT = {"host": "box", "id": "U7", "severity": "critical", "text": "/data: inodes 100 % used",
         "fix": "delete files"}


async def _no_sleep(_s: float) -> None:
    return None


async def test_the_alert_arrives_as_json_with_an_ntfy_title() -> None:
    with webhook() as hook:
        assert await post_alert(hook.url, ALERT) == 1
    assert hook.bodies == [ALERT]
    assert hook.headers[0]["Content-Type"] == "application/json"
    assert hook.headers[0]["Title"] == "gpuroom critical: box"


async def test_a_failing_server_is_retried_then_delivered() -> None:
    pauses: list[float] = []

    async def sleep(s: float) -> None:
        pauses.append(s)

    with webhook(answers=[503, 429]) as hook:
        assert await post_alert(hook.url, ALERT, sleep=sleep) == 3
    assert hook.statuses == [503, 429, 200]
    assert hook.bodies == [ALERT]
    assert pauses == [1.0, 2.0]


@pytest.mark.attack("secrets", "a notify_url token appears in the error shown on a failure")
async def test_retries_are_bounded_and_the_error_hides_the_token() -> None:
    with webhook(answers=[500] * 5) as hook:
        with pytest.raises(NotifyError) as err:
            await post_alert(hook.url, ALERT, sleep=_no_sleep)
    assert hook.statuses == [500, 500, 500]
    assert "after 3 attempt(s) (HTTP 500)" in str(err.value)
    assert "secret-token" not in str(err.value)
    assert err.value.fix and "notify_url" in err.value.fix


async def test_a_refusal_or_a_redirect_is_not_retried() -> None:
    for status, said in ((404, r"refused the alert \(HTTP 404\)"), (302, "redirected")):
        with webhook(answers=[status]) as hook:
            with pytest.raises(NotifyError, match=said):
                await post_alert(hook.url, ALERT, sleep=_no_sleep)
        assert hook.statuses == [status]


@pytest.mark.attack("faults", "notify_url's server is down: nothing listens on the port")
async def test_nothing_listening_is_a_bounded_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(NotifyError, match="not delivered after 2 attempt"):
        await post_alert(f"http://127.0.0.1:{port}/t", ALERT, attempts=2, timeout_s=2,
                         sleep=_no_sleep)


@pytest.mark.attack("faults", "notify_url's server accepts the connection and never answers")
async def test_a_server_that_never_answers_is_bounded_and_alerts_beyond_the_bound_dropped(
        ) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)  # the kernel accepts; nobody reads or answers
        url = f"http://127.0.0.1:{s.getsockname()[1]}/t"
        notifier = UrlNotifier(url, max_in_flight=1, attempts=2, timeout_s=1, sleep=_no_sleep)
        first = asyncio.create_task(notifier.send(ALERT))
        for _ in range(1000):
            if notifier.in_flight:
                break
            await asyncio.sleep(0)
        with pytest.raises(NotifyError, match="was dropped"):
            await notifier.send({**ALERT, "host": "other"})
        with pytest.raises(NotifyError, match=r"after 2 attempt\(s\) \(timed out"):
            await asyncio.wait_for(first, 30)
    assert notifier.in_flight == 0
