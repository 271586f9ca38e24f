"""One probe = one JSON document about the box. Shared by ``probe`` (one-shot) and ``serve``.

Each section comes from one collector. A collector that raises becomes an entry in
``errors`` naming the section; the rest of the document is still produced, so a box that
lacks a GPU, dmesg permission, cgroup v2 or a mount never makes the probe fail.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Callable, Dict, List, Optional

from . import SCHEMA, __version__, hostinfo, selfhash

Request = Dict[str, Any]
Collector = Callable[["ProbeSession", Request], Dict[str, Any]]


def _collect_host(session: ProbeSession, request: Request) -> Dict[str, Any]:
    return {"host": hostinfo.host_facts()}


def _collect_cgroup(session: ProbeSession, request: Request) -> Dict[str, Any]:
    return {"cgroup": hostinfo.cgroup_facts()}


def _collect_disks(session: ProbeSession, request: Request) -> Dict[str, Any]:
    mounts = [str(m) for m in request.get("mounts") or []]
    return {"disks": hostinfo.disks(mounts)}


# Order is the document's order.
COLLECTORS: List[Any] = [
    ("host", _collect_host),
    ("cgroup", _collect_cgroup),
    ("disks", _collect_disks),
]

# Sections living in their own modules: (section name, module). Each module exposes
# ``collect(session, request) -> dict`` whose keys are merged into the document.
OPTIONAL_SECTIONS = [
    ("gpus", "gpu"),
    ("kernel", "kernel"),
    ("vram_holders", "vram"),
    ("queue", "queue"),
]


def _module_collector(module: str) -> Collector:
    def collect(session: ProbeSession, request: Request) -> Dict[str, Any]:
        mod = __import__("gpuroom.remote." + module, fromlist=["collect"])
        return mod.collect(session, request)  # type: ignore[no-any-return]

    return collect


def _register_optional() -> None:
    import importlib.util

    for name, module in OPTIONAL_SECTIONS:
        if importlib.util.find_spec("gpuroom.remote." + module) is not None:
            COLLECTORS.append((name, _module_collector(module)))


def register(name: str, collector: Collector) -> None:
    """Add a section; a later registration of the same name replaces the earlier one."""
    for i, (existing, _) in enumerate(COLLECTORS):
        if existing == name:
            COLLECTORS[i] = (name, collector)
            return
    COLLECTORS.append((name, collector))


_register_optional()

Deriver = Callable[["ProbeSession", Dict[str, Any]], Dict[str, Any]]


def _derive_idle(session: ProbeSession, doc: Dict[str, Any]) -> Dict[str, Any]:
    from . import idle

    return idle.derive(session, doc)


# Sections computed from the collected ones (after them, in this order): their errors are
# reported like a collector's.
DERIVED: List[Any] = [("idle", _derive_idle)]


def _section_error(name: str, exc: BaseException) -> Dict[str, Any]:
    return {"section": name, "error": f"{type(exc).__name__}: {exc}",
            "trace": traceback.format_exc(limit=3)[-800:]}


class ProbeSession:
    """State that lives as long as the helper process: NVML handles, kernel-log cursors.

    A one-shot ``probe`` makes one and drops it; ``serve`` keeps one for every request, so
    the box pays NVML init and interpreter start once (DESIGN: the two sides).
    """

    def __init__(self) -> None:
        self.state: Dict[str, Any] = {}

    def snapshot(self, request: Optional[Request] = None) -> Dict[str, Any]:
        request = request or {}
        started = time.monotonic()
        doc: Dict[str, Any] = {
            "schema": SCHEMA,
            "helper": {"version": __version__, "sha256": selfhash.own_sha256()},
        }
        errors = []
        for name, collect in COLLECTORS:
            try:
                doc.update(collect(self, request))
            except Exception as exc:  # one broken section must not hide the others
                errors.append(_section_error(name, exc))
        for name, derive in DERIVED:
            try:
                doc.update(derive(self, doc))
            except Exception as exc:  # as above: the collected sections still answer
                errors.append(_section_error(name, exc))
        doc["errors"] = errors
        doc["probe_ms"] = round((time.monotonic() - started) * 1000.0, 3)
        return doc

    def close(self) -> None:
        for closer in self.state.pop("_closers", []):
            try:
                closer()
            except Exception as exc:  # shutdown of an optional section; report, continue
                import sys

                sys.stderr.write(f"gpuroom-remote: close failed: {exc}\n")
