"""The teardown gate (principle 9): is it safe to stop paying for this host?

Pure: it reads the latest snapshot, the box's current manifests of each job's checkpoint dir
and the pull records, and answers a checklist. gpuroom never stops or deletes anything on
its own; "safe" only lets the user's own teardown step be offered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuroom.remote.queue_events import FINAL_STATES
from gpuroom.tui.snapshot import Snapshot

TORCH_SUFFIXES = (".pt", ".pth", ".ckpt")


@dataclass
class GateItem:
    name: str
    ok: bool
    detail: str


@dataclass
class GateResult:
    host: str
    safe: bool
    items: list[GateItem] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "safe": self.safe,
                "items": [{"name": i.name, "ok": i.ok, "detail": i.detail} for i in self.items]}


def _queue_item(snapshot: Snapshot | None) -> GateItem:
    name = "queue finished or stopped"
    if snapshot is None:
        return GateItem(name, False, "no snapshot from this host yet")
    if snapshot.queue is None:
        return GateItem(name, False, "the snapshot has no queue section")
    live = [f"{j.key} {j.state}" for j in snapshot.jobs if j.state not in FINAL_STATES]
    if live:
        return GateItem(name, False, "not final: " + ", ".join(live[:5])
                        + (f" (+{len(live) - 5})" if len(live) > 5 else ""))
    return GateItem(name, True, f"{len(snapshot.jobs)} jobs, all final")


def _latest_record(records: list[dict[str, Any]], host: str, job: str) -> dict[str, Any] | None:
    mine = [r for r in records if r.get("host") == host and str(r.get("job")) == job]
    return max(mine, key=lambda r: float(r.get("time") or 0)) if mine else None


def evaluate(host: str, snapshot: Snapshot | None, records: list[dict[str, Any]],
             job_outputs: dict[str, list[dict[str, Any]] | None],
             expected_helper_sha: str | None = None) -> GateResult:
    """The checklist for one host.

    ``job_outputs``: job id -> the box's current manifest entries of that job's checkpoint
    dir (None when the manifest could not be taken or was cut). Jobs with no files need no
    pull.
    """
    items = [_queue_item(snapshot)]
    missing, stale, unverified, not_loaded = [], [], [], []
    pulled_files = 0
    for job, entries in sorted(job_outputs.items()):
        if entries is None:
            missing.append(f"{job} (its outputs could not be listed)")
            continue
        files = [e for e in entries if e.get("kind") == "file"]
        if not files:
            continue
        record = _latest_record(records, host, job)
        if record is None:
            missing.append(job)
            continue
        have = {f.get("path"): f for f in record.get("files") or []}
        for e in files:
            got = have.get(e["path"])
            if got is None or got.get("sha256") != e.get("sha256"):
                # Written or changed on the box since the pull: the local copy is not it.
                stale.append(f"{job}/{e['path']}")
                continue
            pulled_files += 1
            if got.get("verified_by") not in ("hash", "load"):
                unverified.append(f"{job}/{e['path']}")
            if str(e["path"]).endswith(TORCH_SUFFIXES) and got.get("verified_by") != "load":
                not_loaded.append(f"{job}/{e['path']}")
    items.append(GateItem("every job's outputs pulled", not missing,
                          "not pulled: " + ", ".join(missing) if missing else
                          f"{len(job_outputs)} jobs checked"))
    bad_hash = stale + unverified
    items.append(GateItem("every pulled file hash-verified", not bad_hash and not missing,
                          "differs from the box or unverified: " + ", ".join(bad_hash[:5])
                          if bad_hash else f"{pulled_files} files match the box's sha256"))
    items.append(GateItem("checkpoints load-verified", not not_loaded and not missing,
                          "hash-verified, not load-verified: " + ", ".join(not_loaded[:5])
                          if not_loaded else "every .pt/.pth/.ckpt loaded on this machine"))
    if expected_helper_sha is not None:
        got_sha = snapshot.helper.sha256 if snapshot is not None else None
        items.append(GateItem("deployed helper matches", got_sha == expected_helper_sha,
                              f"box runs {str(got_sha)[:12]}, expected "
                              f"{expected_helper_sha[:12]}"))
    return GateResult(host, all(i.ok for i in items), items)
