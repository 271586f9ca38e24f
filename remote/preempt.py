"""A spot box's preemption notice, from its cloud's metadata endpoint (U45).

  AWS    IMDSv2: PUT /latest/api/token (X-aws-ec2-metadata-token-ttl-seconds), then
         GET /latest/meta-data/spot/instance-action with X-aws-ec2-metadata-token:
         404 = no notice; 200 = {"action": "terminate|stop|hibernate", "time": "...Z"} (~120 s)
  GCP    GET /computeMetadata/v1/instance/preempted with Metadata-Flavor: Google:
         "FALSE", or "TRUE" once the VM is being preempted (~30 s; no time given)
  Azure  GET /metadata/scheduledevents?api-version=2020-07-01 with Metadata: true:
         {"Events": [...]}; one with "EventType": "Preempt" is the notice (NotBefore, >= 30 s)

The queue's runner asks at most every ``EVERY_S`` while it has jobs, each ask bounded by
``TIMEOUT_S`` in all; on a notice it records a ``preempt_notice`` event and sends SIGUSR1 to
every running job's process group, which gpuroom.remote.checkpoint turns into a save at the
next step. The base URL is configurable (``queue config --metadata-url``) so a test serves the
documented answers from 127.0.0.1. Never through a proxy: the endpoint is link-local.

  gpuroom-remote preempt --cloud aws|gcp|azure [--url BASE]   one check, as JSON
"""

from __future__ import annotations

import argparse
import calendar
import email.utils
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional

# "gcp-preemptible": a legacy preemptible VM, asked like GCP; it also dies 24 h after its
# start, which the jump host's danger clock counts (tui/rules/clock.py).
CLOUDS = ("aws", "gcp", "gcp-preemptible", "azure")
DEFAULT_URL = {"aws": "http://169.254.169.254", "gcp": "http://metadata.google.internal",
               "gcp-preemptible": "http://metadata.google.internal",
               "azure": "http://169.254.169.254"}
TIMEOUT_S = 0.1  # one whole check, every request of it included
EVERY_S = 5.0  # at most one check per this many seconds
GCP_NOTICE_S = 30.0  # GCP says only "TRUE": its documented shutdown window
MAX_BODY = 64 * 1024
AZURE_API = "2020-07-01"

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _Deadline:
    def __init__(self, total: float) -> None:
        self.end = time.monotonic() + total

    def left(self) -> float:
        left = self.end - time.monotonic()
        if left <= 0:
            raise TimeoutError("metadata endpoint over the time bound")
        return left


def _get(url: str, headers: Dict[str, str], deadline: _Deadline,
         method: str = "GET") -> Optional[bytes]:
    """The body of a 200, None for a 404; anything else raises OSError or ValueError."""
    req = urllib.request.Request(url, headers=headers, method=method)
    try:
        with _OPENER.open(req, timeout=deadline.left()) as resp:
            return bytes(resp.read(MAX_BODY))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise OSError(f"HTTP {exc.code} from {url}") from None


def _aws_time(text: Any) -> Optional[float]:
    try:
        return float(calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


def _azure_time(text: Any) -> Optional[float]:
    parsed = email.utils.parsedate_tz(str(text or ""))
    return float(email.utils.mktime_tz(parsed)) if parsed else None


def _aws(base: str, deadline: _Deadline, now: float) -> Dict[str, Any]:
    token = _get(base + "/latest/api/token", {"X-aws-ec2-metadata-token-ttl-seconds": "60"},
                 deadline, method="PUT")
    if not token:
        raise OSError("IMDSv2 gave no token")
    body = _get(base + "/latest/meta-data/spot/instance-action",
                {"X-aws-ec2-metadata-token": token.decode("ascii", "replace").strip()},
                deadline)
    if body is None:
        return {"notice": False}
    doc = json.loads(body.decode("utf-8"))
    if not isinstance(doc, dict) or not isinstance(doc.get("action"), str):
        raise ValueError("instance-action is not {action, time}")
    return {"notice": True, "action": doc["action"][:20], "at": _aws_time(doc.get("time"))}


def _gcp(base: str, deadline: _Deadline, now: float) -> Dict[str, Any]:
    body = _get(base + "/computeMetadata/v1/instance/preempted", {"Metadata-Flavor": "Google"},
                deadline)
    flag = (body or b"").strip().upper()
    if flag not in (b"TRUE", b"FALSE"):
        raise ValueError("instance/preempted is neither TRUE nor FALSE")
    if flag == b"FALSE":
        return {"notice": False}
    return {"notice": True, "action": "preempt", "at": now + GCP_NOTICE_S}


def _azure(base: str, deadline: _Deadline, now: float) -> Dict[str, Any]:
    body = _get(base + "/metadata/scheduledevents?api-version=" + AZURE_API, {"Metadata": "true"},
                deadline)
    doc = json.loads((body or b"{}").decode("utf-8"))
    events = doc.get("Events") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise ValueError("scheduledevents has no Events list")
    for ev in events:
        if isinstance(ev, dict) and ev.get("EventType") == "Preempt":
            # An empty NotBefore: the event has started already.
            return {"notice": True, "action": "preempt",
                    "at": _azure_time(ev.get("NotBefore")) or now}
    return {"notice": False}


_CHECKS = {"aws": _aws, "gcp": _gcp, "gcp-preemptible": _gcp, "azure": _azure}


def check(cloud: str, url: Optional[str] = None, *, timeout: float = TIMEOUT_S,
          now: Optional[float] = None) -> Dict[str, Any]:
    """One bounded check: {cloud, notice, action, at (epoch), seconds_left, error}."""
    now = time.time() if now is None else now
    base = (url or DEFAULT_URL.get(cloud, "")).rstrip("/")
    out: Dict[str, Any] = {"cloud": cloud, "notice": False, "action": None, "at": None,
                           "seconds_left": None, "error": None, "t": now}
    if cloud not in _CHECKS:
        out["error"] = f"unknown cloud {cloud!r} (one of {', '.join(CLOUDS)})"
        return out
    try:
        out.update(_CHECKS[cloud](base, _Deadline(timeout), now))
    except (OSError, ValueError, TimeoutError) as exc:  # URLError is an OSError
        out["error"] = f"{type(exc).__name__}: {str(exc)[:160]}"
    if out["notice"] and out["at"] is not None:
        out["seconds_left"] = max(0.0, round(out["at"] - now, 1))
    return out


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuroom-remote preempt")
    parser.add_argument("--cloud", required=True, choices=CLOUDS)
    parser.add_argument("--url", default=None, help="the metadata endpoint's base URL")
    args = parser.parse_args(argv)
    doc = check(args.cloud, args.url)
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    return 0 if doc["error"] is None else 1
