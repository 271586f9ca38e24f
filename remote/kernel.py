"""Kernel-log findings: NVIDIA Xid errors, GPUs fallen off the bus, OOM kills (U3, U9, U22).

The box's kernel ring buffer is read with ``dmesg`` (or ``/dev/kmsg`` when there is no dmesg
binary) and reduced to a short list of events. Reading it is a privilege on many rentals
(``kernel.dmesg_restrict=1``): a refusal is a normal answer (``"log": "denied"``), never an
error, because "dmesg is clean" and "dmesg could not be read" lead the doctor to different
verdicts on the vanished-process ladder (U3).

Event merging (one event per kill, not per line of the OOM report):

* ``oom-kill:constraint=...,task=NAME,pid=N`` opens an event for pid N; the next
  ``Killed process N (NAME)`` line with the same pid is the same kill and is merged into it.
* The old (3.x) ``Kill process N (NAME) score S or sacrifice child`` names the process the
  killer *selected*; the ``Killed process M (NAME)`` right after it names the one actually
  killed (often a child, M != N). They merge into one event whose pid is M and whose
  ``selected_pid`` is N.
* ``oom_reaper: reaped process N`` and ``... invoked oom-killer`` are aftermath and cause of
  an already counted kill and add no event.
* A ``Killed process`` line that follows no open report is an event by itself.

``memcg`` is true when the constraint is ``CONSTRAINT_MEMCG`` or the report says
``Memory cgroup out of memory``: the job hit its own cgroup limit (U9), not the host's RAM.
"""

from __future__ import annotations

import collections
import errno
import os
import re
import selectors
import shutil
import subprocess
import time
from typing import Any, Deque, Dict, List, Optional, Tuple

KMSG_PATH = "/dev/kmsg"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
MAX_EVENTS = 50
DEADLINE_S = 3.0  # the jump host's per-tick deadline is a few seconds; stay well inside it
_STDERR_KEEP_BYTES = 2048
_READ_CHUNK_BYTES = 65536

# Prefixes a kernel line carries depending on who printed it: dmesg --raw level, syslog or
# journal time and host, a bare "kernel:", then dmesg's monotonic seconds or -T ctime.
_PREFIX = re.compile(
    r"^(?:<\d+>)?"
    r"(?:(?:[A-Z][a-z]{2} +\d{1,2} \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\S+) \S+ )?"
    r"(?:kernel: ?)?"
    r"(?:\[ *(?P<mono>\d+\.\d+)\] ?|\[(?P<wall>[A-Z][a-z]{2} [^\]]*\d{4})\] ?)?"
)
# Old drivers print "Xid (0000:01:00)", newer ones "Xid (PCI:0000:01:00)".
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\): (?P<code>\d+)")
_XID_PID = re.compile(r"\bpid='?(?P<pid>\d+|<unknown>)'?")
_XID_NAME = re.compile(r"\bname=(?P<name>[^,\s]+)")
# gpu_lost names the function too ("0000:b3:00.0"); keep domain:bus:device like Xid lines.
_PCI_BDF = r"(?P<pci>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.\d)?"
_GPU_LOST_HEAD = re.compile(r"NVRM: The NVIDIA GPU " + _PCI_BDF)
_PCI_ANY = re.compile(_PCI_BDF)
_FALLEN = "fallen off the bus"
_OOM_CONSTRAINT = re.compile(
    r"oom-kill:constraint=(?P<constraint>\w+),.*,task=(?P<task>.*),pid=(?P<pid>\d+)(?:,|$)"
)
# Lazy name up to the ")" that ends it: "((resolved))" is the process "(resolved)".
_OOM_KILLED = re.compile(r"Killed process (?P<pid>\d+) \((?P<name>.*?)\)(?=[ ,:]|$)")
_OOM_SELECTED = re.compile(
    r"Kill process (?P<pid>\d+) \((?P<name>.*?)\) score -?\d+ or sacrifice child"
)
_MEMCG_REPORT = "Memory cgroup out of memory"
# A multi-line "fallen off the bus" message spans 3 lines; give up on a head after this many.
_GPU_LOST_SPAN_LINES = 4


def _strip_prefix(line: str) -> Tuple[Optional[float], str]:
    m = _PREFIX.match(line)
    if m is None:  # the pattern is all optional, so this does not happen; typed for mypy
        return None, line
    mono = m.group("mono")
    return (float(mono) if mono else None), line[m.end():]


class KernelLogParser:
    """Streaming reduction of kernel log lines to events, so a 32 MiB ring costs no memory.

    ``keep`` bounds the event list (oldest dropped first, counted in ``dropped``); ``after``
    drops events stamped at or before that monotonic second (the cursor).
    """

    def __init__(self, keep: int = 0, after: Optional[float] = None) -> None:
        self.events: Deque[Dict[str, Any]] = collections.deque(maxlen=keep or None)
        self.after = after
        self.dropped = 0
        self.counts: Dict[str, int] = {"xid": 0, "oom": 0, "gpu_lost": 0}
        self.last_ts: Optional[float] = None
        self._record_ts: Optional[float] = None
        self._open_oom: Optional[Dict[str, Any]] = None
        self._lost_head: Optional[Dict[str, Any]] = None
        self._last_xid: Optional[Dict[str, Any]] = None

    def feed(self, line: str) -> None:
        line = line.rstrip("\r\n")
        if not line.strip():
            return
        continuation = line[:1].isspace()
        ts, body = _strip_prefix(line)
        if ts is not None:
            self._record_ts = ts
            self.last_ts = ts
        elif not continuation:
            # A new record without a monotonic stamp (ctime, journal -o cat): no cursor for it.
            self._record_ts = None
        self._handle(self._record_ts, body.strip(), line)

    def feed_record(self, ts: Optional[float], message: str) -> None:
        """One /dev/kmsg record: its lines after the first are continuations (\\x0a-escaped)."""
        if ts is not None:
            self.last_ts = ts
        self._record_ts = ts
        for part in message.replace("\\x0a", "\n").split("\n"):
            if part.strip():
                self._handle(ts, part.strip(), part)

    def finish(self) -> List[Dict[str, Any]]:
        return list(self.events)

    def _emit(self, event: Dict[str, Any]) -> bool:
        ts = event.get("ts")
        if self.after is not None and ts is not None and ts <= self.after:
            return False
        if self.events.maxlen is not None and len(self.events) == self.events.maxlen:
            self.dropped += 1
        self.counts[event["kind"]] += 1
        self.events.append(event)
        return True

    def _handle(self, ts: Optional[float], body: str, line: str) -> None:
        if "NVRM" in body:
            self._nvrm(ts, body, line)
        elif self._lost_head is not None:
            self._lost_head = None  # the message ended without saying the GPU is lost
        if "process" in body or "oom-kill:" in body:
            self._oom(ts, body, line)

    def _nvrm(self, ts: Optional[float], body: str, line: str) -> None:
        m = _XID.search(body)
        if m is not None:
            self._lost_head = None
            pid_m = _XID_PID.search(body, m.end())
            name_m = _XID_NAME.search(body, m.end())
            pid_text = pid_m.group("pid") if pid_m else None
            name = name_m.group("name") if name_m else None
            event = {
                "kind": "xid",
                "code": int(m.group("code")),
                "pci": m.group("pci"),
                "pid": int(pid_text) if pid_text and pid_text.isdigit() else None,
                "process": None if name in (None, "<unknown>") else name,
                "line": line,
                "ts": ts,
            }
            self._last_xid = event
            self._emit(event)
            return
        head = _GPU_LOST_HEAD.search(body)
        if head is not None:
            self._lost_head = {"pci": head.group("pci"), "lines": [line], "ts": ts}
        elif self._lost_head is not None:
            self._lost_head["lines"].append(line)
        if _FALLEN in body or (
            self._lost_head is not None and _FALLEN in " ".join(self._lost_head["lines"])
        ):
            self._gpu_lost(ts, body, line)
        elif self._lost_head is not None and len(self._lost_head["lines"]) >= _GPU_LOST_SPAN_LINES:
            self._lost_head = None

    def _gpu_lost(self, ts: Optional[float], body: str, line: str) -> None:
        head = self._lost_head
        self._lost_head = None
        if head is not None:
            pci: Optional[str] = head["pci"]
            text = "\n".join(head["lines"])
            ts = head["ts"]
        else:
            pci_m = _PCI_ANY.search(body)
            pci = pci_m.group("pci") if pci_m else None
            text = line
        last = self._last_xid
        # Xid 79 already says "fallen off the bus" for this GPU; a second event is noise.
        if last is not None and last["code"] == 79 and pci is not None and last["pci"] == pci:
            return
        self._emit({"kind": "gpu_lost", "pci": pci, "line": text, "ts": ts})

    def _oom(self, ts: Optional[float], body: str, line: str) -> None:
        opener = _OOM_CONSTRAINT.search(body)
        by = "constraint"
        if opener is None:
            opener = _OOM_SELECTED.search(body)
            by = "selected"
        if opener is not None:
            if by == "constraint":
                pid, name = int(opener.group("pid")), opener.group("task")
                memcg = opener.group("constraint") == "CONSTRAINT_MEMCG"
            else:
                pid, name = int(opener.group("pid")), opener.group("name")
                memcg = _MEMCG_REPORT in body
            event = {"kind": "oom", "pid": pid, "process": name, "memcg": memcg,
                     "line": line, "ts": ts}
            self._open_oom = {"event": event, "by": by, "emitted": self._emit(event)}
            return
        killed = _OOM_KILLED.search(body)
        if killed is None or "reaped process" in body:
            return
        pid, name = int(killed.group("pid")), killed.group("name")
        opened, self._open_oom = self._open_oom, None
        if opened is not None and (opened["by"] == "selected" or opened["event"]["pid"] == pid):
            if not opened["emitted"]:
                return  # the report began at or before the cursor: reported last time
            event = opened["event"]
            if opened["by"] == "selected":
                event["selected_pid"] = event["pid"]
            event["pid"], event["process"], event["line"] = pid, name, line
            event["memcg"] = event["memcg"] or _MEMCG_REPORT in body
            return
        self._emit({"kind": "oom", "pid": pid, "process": name,
                    "memcg": _MEMCG_REPORT in body, "line": line, "ts": ts})


def parse_kernel_log(text: str) -> List[Dict[str, Any]]:
    """Every Xid, gpu_lost and OOM-kill event in a kernel log, in order (no bound, no cursor)."""
    parser = KernelLogParser()
    for line in text.splitlines():
        parser.feed(line)
    return [_public(e) for e in parser.finish()]


def _public(event: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in event.items() if not k.startswith("_")}


def _boot_id() -> Optional[str]:
    try:
        with open(BOOT_ID_PATH, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _dmesg_binary() -> Optional[str]:
    override = os.environ.get("GPUROOM_DMESG")
    if override:
        return override if os.access(override, os.X_OK) else None
    return shutil.which("dmesg")


def _denied(text: str) -> bool:
    return "Operation not permitted" in text or "Permission denied" in text


def _unsupported_option(text: str) -> bool:
    lowered = text.lower()
    return "unrecognized option" in lowered or "invalid option" in lowered or "usage:" in lowered


def _run_dmesg(
    argv: List[str], parser: KernelLogParser, deadline: float
) -> Tuple[Optional[int], str, int]:
    """Stream dmesg's stdout into the parser: (exit code, None on timeout; stderr; bytes)."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=dict(os.environ, LC_ALL="C"))
    assert proc.stdout is not None and proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    pending = b""
    err = b""
    total = 0
    open_streams = 2
    try:
        while open_streams:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                proc.kill()
                proc.wait()
                return None, err.decode("utf-8", "replace"), total
            for key, _ in sel.select(remaining):
                chunk = os.read(key.fd, _READ_CHUNK_BYTES)
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                elif key.fileobj is proc.stderr:
                    err = (err + chunk)[:_STDERR_KEEP_BYTES]
                else:
                    total += len(chunk)
                    lines = (pending + chunk).split(b"\n")
                    pending = lines.pop()
                    for raw in lines:
                        parser.feed(raw.decode("utf-8", "replace"))
        if pending:
            parser.feed(pending.decode("utf-8", "replace"))
        rc = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None, err.decode("utf-8", "replace"), total
    finally:
        sel.close()
        proc.stdout.close()
        proc.stderr.close()
    return rc, err.decode("utf-8", "replace"), total


def _read_kmsg(path: str, parser: KernelLogParser, deadline: float) -> Tuple[str, Optional[str]]:
    """Drain /dev/kmsg without blocking. Returns (log status, detail)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            return "denied", f"{path}: {exc.strerror}"
        return "unavailable", f"{path}: {exc.strerror}"
    try:
        while True:
            if time.monotonic() > deadline:
                return "partial", f"deadline reached while reading {path}"
            try:
                chunk = os.read(fd, 8192)  # /dev/kmsg hands out one record per read
            except BlockingIOError:
                return "ok", None
            except BrokenPipeError:
                continue  # the record under the read position was overwritten; go on
            except OSError as exc:
                if exc.errno in (errno.EPERM, errno.EACCES):
                    return "denied", f"{path}: {exc.strerror}"
                raise
            if not chunk:
                return "ok", None
            for raw in chunk.decode("utf-8", "replace").split("\n"):
                _kmsg_record(raw, parser)
    finally:
        os.close(fd)


def _kmsg_record(raw: str, parser: KernelLogParser) -> None:
    # "PRI,SEQ,TS_USEC,FLAGS[,...];message"; lines starting with a space are key=value props.
    if not raw or raw[0] == " " or ";" not in raw:
        return
    header, message = raw.split(";", 1)
    fields = header.split(",")
    if len(fields) < 3 or not fields[0].isdigit():
        return
    if int(fields[0]) >> 3 != 0:
        return  # not the kernel facility (a userspace write to /dev/kmsg), like dmesg --kernel
    ts = int(fields[2]) / 1e6 if fields[2].isdigit() else None
    parser.feed_record(ts, message)


def _cursor_after(cursor: Any, boot_id: Optional[str]) -> Tuple[Optional[float], bool]:
    """The monotonic second to resume after, and whether a given cursor had to be discarded."""
    if not isinstance(cursor, dict):
        return None, cursor is not None
    ts = cursor.get("ts")
    # Monotonic seconds restart at every boot: an old cursor would hide the new boot's events.
    if cursor.get("boot_id") != boot_id or not isinstance(ts, (int, float)):
        return None, True
    return float(ts), False


def read_kernel_log(request: Dict[str, Any]) -> Dict[str, Any]:
    """The ``kernel`` section: bounded recent events after the request's cursor."""
    boot_id = _boot_id()
    after, reset = _cursor_after(request.get("kernel_cursor"), boot_id)
    parser = KernelLogParser(keep=MAX_EVENTS, after=after)
    deadline = time.monotonic() + DEADLINE_S
    binary = _dmesg_binary()
    detail: Optional[str] = None
    bytes_read = 0
    if binary is not None:
        source = "dmesg"
        try:
            rc, err, bytes_read = _run_dmesg([binary, "--kernel", "--nopager"], parser, deadline)
            if rc not in (0, None) and _unsupported_option(err):
                # busybox dmesg knows neither flag; its plain output is the kernel ring too.
                parser = KernelLogParser(keep=MAX_EVENTS, after=after)
                rc, err, bytes_read = _run_dmesg([binary], parser, deadline)
        except OSError as exc:  # a dmesg that cannot be executed is a finding, not a crash
            rc, err = -1, f"cannot run {binary}: {exc.strerror or exc}"
        if rc == -1:
            log, detail = "error", err
        elif rc is None:
            log, detail = "partial", f"dmesg did not finish within {DEADLINE_S:.1f}s"
        elif rc == 0:
            log = "ok"
        elif _denied(err):
            log, detail = "denied", err.strip().splitlines()[0]
        else:
            log, detail = "error", f"dmesg exit {rc}: {err.strip()[:200]}"
    else:
        source = "kmsg"
        try:
            log, detail = _read_kmsg(KMSG_PATH, parser, deadline)
        except OSError as exc:
            log, detail = "error", f"{KMSG_PATH}: {exc.strerror or exc}"
    events = [_public(e) for e in parser.finish()] if log in ("ok", "partial") else []
    last_ts = parser.last_ts if parser.last_ts is not None else after
    return {
        "log": log,
        "source": source,
        "detail": detail,
        "events": events,
        "counts": dict(parser.counts) if events else {"xid": 0, "oom": 0, "gpu_lost": 0},
        "dropped": parser.dropped if events else 0,
        "bytes_read": bytes_read,
        "cursor_reset": reset,
        "cursor": {"boot_id": boot_id, "ts": last_ts},
    }


def collect(session: Any, request: Dict[str, Any]) -> Dict[str, Any]:
    """Probe section ``kernel``; see :func:`read_kernel_log`."""
    return {"kernel": read_kernel_log(request)}
