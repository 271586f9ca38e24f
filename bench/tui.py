"""The control room under load: 200 replayed hosts polling, one job's log streaming fast.

Measures, on the real GpuroomApp (headless, 200x60) driven by a StaticFleet of 200 hosts cloned
from the recorded scenarios (tests/data/scenario-*.json):

* key-to-repaint: a ``j``/``k`` key event handed to the driver (as a terminal's input thread
  does) -> the end of the first screen update whose frame holds the moved hosts-table cursor;
* frames/s: screen updates written (``App._display`` calls with something to draw), each one
  also turned into the terminal bytes a real driver would write (headless skips that step);
* log bytes/s the tail pane absorbs: bytes LogTail took from snapshots' ``log_chunk``s, while
  the fleet feeds the selected job's log at a fixed rate (or as fast as it can, "flood");
* stalls: the lateness of a 5 ms ticker task on the app's event loop (the longest is the
  longest time nothing, keys included, could be handled);
* RSS: VmHWM (peak) and VmRSS of the process, one process per run.

Runs are separate processes, the variants interleaved A B A B.., medians reported. Writes the
``tui`` section of docs/PERFORMANCE.md.

    .venv/bin/python bench/tui.py [--runs 3] [--hosts 200] [--seconds 4] [--rate-mb 50]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from _report import machine, write_section  # noqa: E402

DATA = ROOT / "tests" / "data"
SCENARIOS = ("healthy", "throttle", "inode", "failed", "stale")
SIZE = (200, 60)
KEY_TIMEOUT_S = 1.0  # a key not repainted within this counts as a miss (and as 1 s)
TICK_S = 0.005


# ----------------------------------------------------------------------------- inputs


def log_block(size: int) -> bytes:
    """``size`` bytes of a training log: step lines, tqdm redraws, some colour, all newline
    terminated, so each chunk is whole lines like a flushed writer's."""
    out = bytearray()
    n = 0
    while len(out) < size:
        n += 1
        if n % 50 == 0:
            out += b"eval  10%|#         | 5/50\reval  60%|######    | 30/50\reval 100%|#####"
            out += b"#####| 50/50\n"
        elif n % 200 == 0:
            out += f"\x1b[33mWARN\x1b[0m step {n}: grad norm 12.5 clipped to 1.0\n".encode()
        else:
            out += (f"step {n} loss {2.5 - n * 1e-6:.4f} lr 3.0e-04 tok/s 410k "
                    f"mem 71.2GiB dt 0.231s\n").encode()
    cut = out.rfind(b"\n", 0, size) + 1
    return bytes(out[:cut])


def fleet_data(n_hosts: int) -> tuple[dict[str, Any], str, str]:
    """A scenario document of ``n_hosts`` remote hosts cloned round-robin from the recordings,
    the first one (an H100 box with a running job) being the host whose log streams."""
    templates = []
    now = 0.0
    for name in SCENARIOS:
        doc = json.loads((DATA / f"scenario-{name}.json").read_text())
        now = float(doc["now"])
        templates += [h for h in doc["hosts"] if h.get("profile") != "local"]
    hosts = []
    for i in range(n_hosts):
        h = copy.deepcopy(templates[i % len(templates)])
        h["name"] = f"{h['name']}-{i:03d}"
        h["history"] = []
        hosts.append(h)
    jobs = hosts[0]["snapshot"]["queue"]["queues"]["default"]["jobs"]
    job = next(j for j in jobs if j.get("state") == "running" and "log_chunk" in j)
    return {"now": now, "hosts": hosts}, hosts[0]["name"], job["id"]


# ----------------------------------------------------------------------------- alternatives


def old_feed(self: Any, data: bytes, keep: int | None = None) -> list[str]:
    """LineSplitter.feed as of ec3691b: every line decoded and sanitized on its own, all of
    them, however many the pane keeps (``keep`` ignored)."""
    from gpuroom.tui.sanitize import display_line

    if b"\n" not in data:
        self._pending += data
        return list(self.flush() if len(self._pending) > self._max_pending else [])
    *complete, rest = (bytes(self._pending) + data).split(b"\n")
    self._pending = bytearray(rest)
    lines = [display_line(raw) for raw in complete]
    if len(self._pending) > self._max_pending:
        lines += self.flush()
    return lines


async def measure_pane(rounds: int, chunk_kib: int) -> dict[str, Any]:
    """LogTail.append_chunk alone, in the mounted app (no polls): old and new splitter
    alternating chunk by chunk, so both see the same machine moments."""
    from textual.widgets import Log

    from gpuroom.tui import sanitize
    from gpuroom.tui.fleet.api import StaticFleet
    from gpuroom.tui.present.log import LogChunk
    from gpuroom.tui.room.app import GpuroomApp
    from gpuroom.widgets.logtail import LogTail

    data, _, _ = fleet_data(5)
    app = GpuroomApp(StaticFleet.from_scenario(data), clock=lambda: float(data["now"]))
    new_feed = sanitize.LineSplitter.feed
    new_width = LogTail._update_size
    block = log_block(chunk_kib * 1024)
    times: dict[str, list[float]] = {"old": [], "new": []}
    async with app.run_test(size=SIZE, headless=True) as pilot:
        await pilot.pause()
        log = app.query_one(LogTail)
        log.show("bench/j1")
        offset = 0
        for i in range(2 * rounds):
            impl = "old" if i % 2 else "new"
            chunk = LogChunk(job_id="j1", offset=offset, inode=1, size=offset + len(block),
                             data=block, reset=False)
            offset += len(block)
            # The old pane also measured widths in Log's thread worker (not in these times).
            with mock.patch.object(sanitize.LineSplitter, "feed",
                                   old_feed if impl == "old" else new_feed), \
                    mock.patch.object(LogTail, "_update_size",
                                      Log._update_size if impl == "old" else new_width):
                t0 = time.perf_counter()
                log.append_chunk(chunk)
                times[impl].append(time.perf_counter() - t0)
                await pilot.pause()  # the frame and Log's width thread run between chunks
        lines = log.line_count
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"variant": "pane", "chunk_kib": chunk_kib, "rounds": rounds, "log_lines": lines,
            "old_ms": med["old"] * 1000, "new_ms": med["new"] * 1000,
            "old_mb_s": len(block) / med["old"] / 1e6, "new_mb_s": len(block) / med["new"] / 1e6,
            "lines_per_chunk": block.count(b"\n")}


# ----------------------------------------------------------------------------- one run


@dataclass
class Phase:
    name: str
    seconds: float = 0.0
    keys: list[float] = field(default_factory=list)  # ms, key -> repaint
    key_misses: int = 0
    frames: int = 0
    frame_bytes: int = 0
    log_fed: int = 0  # bytes handed to the fleet
    log_taken: int = 0  # bytes the pane wrote as lines
    log_skipped: int = 0  # bytes the pane reported as "not fetched" (merged polls)
    lags: list[float] = field(default_factory=list)  # ms, ticker lateness
    polls: int = 0


async def measure(variant: str, *, n_hosts: int, seconds: float, rate_mb: float,
                  chunk_kib: int, poll_interval: float) -> dict[str, Any]:
    os.environ["TZ"] = "UTC"
    time.tzset()
    from textual import events

    from gpuroom.tui.fleet.api import StaticFleet
    from gpuroom.tui.present.log import advance_log as real_advance
    from gpuroom.tui.room.app import GpuroomApp
    from gpuroom.widgets import logtail
    from gpuroom.widgets.hosts import HostsTable

    data, stream_host, stream_job = fleet_data(n_hosts)
    fleet = StaticFleet.from_scenario(data)
    t_start = time.time()
    base_now = float(data["now"])
    app = GpuroomApp(fleet, clock=lambda: base_now + (time.time() - t_start))

    phase = Phase("warmup")
    block = log_block(chunk_kib * 1024)
    block_b64 = base64.b64encode(block).decode("ascii")

    # What LogTail takes from each chunk: the only change to the app is this count.

    def counting_advance(cursor: Any, chunk: Any) -> Any:
        out = real_advance(cursor, chunk)
        phase.log_taken += len(out[0])
        phase.log_skipped += out[2]
        return out

    # Left in place: this process measures one phase list and exits.
    mock.patch.object(logtail, "advance_log", counting_advance).start()

    pending_key: list[tuple[float, int]] = []  # (sent at, cursor row before)

    async with app.run_test(size=SIZE, headless=True) as pilot:
        table = app.query_one(HostsTable)
        console = app.console
        real_display = app._display

        def display(screen: Any, renderable: Any) -> None:
            if renderable is not None:
                # The headless driver draws nothing; a terminal driver would build these bytes.
                phase.frame_bytes += len(renderable.render_segments(console))
                phase.frames += 1
            real_display(screen, renderable)
            if pending_key and renderable is not None and table.cursor_row != pending_key[0][1]:
                sent, _ = pending_key.pop()
                phase.keys.append((time.perf_counter() - sent) * 1000)

        app._display = display  # type: ignore[method-assign]
        driver = app._driver
        assert driver is not None
        for _ in fleet.play_backlog():
            pass
        await pilot.pause()

        stop = asyncio.Event()

        async def ticker() -> None:
            due = time.perf_counter() + TICK_S
            while not stop.is_set():
                await asyncio.sleep(TICK_S)
                now = time.perf_counter()
                phase.lags.append(max(0.0, now - due) * 1000)
                due = now + TICK_S

        async def keys() -> None:
            n = 0
            while not stop.is_set():
                await asyncio.sleep(0.15 + (n % 3) * 0.02)  # off the frame grid
                if pending_key:  # still waiting: the previous key missed
                    sent, _ = pending_key.pop()
                    if time.perf_counter() - sent > KEY_TIMEOUT_S:
                        phase.key_misses += 1
                    else:
                        pending_key.append((sent, _))
                        continue
                key = "j" if (n // 6) % 2 == 0 else "k"
                n += 1
                pending_key.append((time.perf_counter(), table.cursor_row))
                event = events.Key(key, key)
                event.set_sender(app)
                driver.send_message(event)

        async def polls(interval: float) -> None:
            # Every host answers once per poll interval, spread evenly, like the real fleet.
            names = [h.name for h in fleet.hosts()][1:]
            snaps = {h.name: h.snapshot for h in fleet.hosts()}
            step = interval / max(1, len(names))
            due = time.perf_counter()
            i = 0
            while not stop.is_set() and interval > 0:
                due += step
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                name = names[i % len(names)]
                i += 1
                fleet.feed(name, snaps[name], app.clock())  # type: ignore[arg-type]
                phase.polls += 1

        stream_snap = copy.deepcopy(fleet.host(stream_host).snapshot)
        assert stream_snap is not None
        stream_job_dict = next(j for j in stream_snap["queue"]["queues"]["default"]["jobs"]
                               if j["id"] == stream_job)
        offset = 10_000_000

        def feed_log() -> None:
            nonlocal offset
            stream_job_dict["log_chunk"] = {
                "offset": offset, "next_offset": offset + len(block), "inode": 42,
                "size": offset + len(block), "data_b64": block_b64, "reset": False,
            }
            offset += len(block)
            phase.log_fed += len(block)
            fleet.feed(stream_host, stream_snap, app.clock())

        async def stream(rate: float | None) -> None:
            feed_log()  # the first chunk only (re)starts the pane at this offset
            due = time.perf_counter()
            while not stop.is_set():
                if rate is None:
                    await asyncio.sleep(0)  # flood: as often as the loop lets it
                else:
                    due += len(block) / rate
                    await asyncio.sleep(max(0.0, due - time.perf_counter()))
                feed_log()

        async def run_phase(name: str, secs: float, *tasks: Callable[[], Any]) -> Phase:
            nonlocal phase
            stop.clear()
            phase = Phase(name)
            running = [asyncio.create_task(t()) for t in (ticker, keys, *tasks)]
            t0 = time.perf_counter()
            await asyncio.sleep(secs)
            stop.set()
            phase.seconds = time.perf_counter() - t0
            await asyncio.gather(*running)
            pending_key.clear()
            await pilot.pause()
            return phase

        interval = poll_interval
        await run_phase("warmup", 0.5, lambda: polls(interval))
        results = [
            await run_phase("idle", seconds, lambda: polls(interval)),
            await run_phase("stream", seconds, lambda: polls(interval),
                            lambda: stream(rate_mb * 1e6)),
            await run_phase("flood", seconds, lambda: polls(interval), lambda: stream(None)),
        ]
        log = app.query_one(logtail.LogTail)
        lines = log.line_count
    status = Path("/proc/self/status").read_text()
    mem = {k: int(v.split()[0]) / 1024 for k, v in
           (line.split(":", 1) for line in status.splitlines()) if k in ("VmHWM", "VmRSS")}
    return {"variant": variant, "phases": [summary(p) for p in results], "log_lines": lines,
            "hwm_mb": mem["VmHWM"], "rss_mb": mem["VmRSS"], "chunk_kib": chunk_kib}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(p: Phase) -> dict[str, Any]:
    s = p.seconds or 1.0
    return {
        "name": p.name, "seconds": p.seconds,
        "key_median_ms": statistics.median(p.keys) if p.keys else float("nan"),
        "key_p95_ms": pct(p.keys, 0.95), "key_max_ms": max(p.keys, default=float("nan")),
        "keys": len(p.keys), "key_misses": p.key_misses,
        "fps": p.frames / s, "frame_kb_s": p.frame_bytes / s / 1e3,
        "fed_mb_s": p.log_fed / s / 1e6, "taken_mb_s": p.log_taken / s / 1e6,
        "skipped_mb_s": p.log_skipped / s / 1e6,
        "stall_max_ms": max(p.lags, default=0.0), "lag_p99_ms": pct(p.lags, 0.99),
        "polls_s": p.polls / s, "raw": asdict(p) | {"lags": [], "keys": p.keys},
    }


# ----------------------------------------------------------------------------- driver


def one_run(variant: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", variant, "--hosts", str(args.hosts),
           "--seconds", str(args.seconds), "--rate-mb", str(args.rate_mb),
           "--chunk-kib", str(args.chunk_kib), "--poll-interval", str(args.poll_interval)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT,
                         timeout=120 + 10 * args.seconds)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per variant (interleaved)")
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=4.0, help="per phase")
    parser.add_argument("--rate-mb", type=float, default=50.0, help="log MB/s fed in 'stream'")
    parser.add_argument("--chunk-kib", type=int, default=1024, help="log bytes per snapshot")
    parser.add_argument("--poll-interval", type=float, default=5.0,
                        help="seconds between two polls of one host (0: no polls)")
    parser.add_argument("--variants", nargs="+", default=["app", "pane"],
                        choices=["app", "pane"])
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-write", action="store_true", help="print, do not touch docs/")
    args = parser.parse_args()
    if args.one == "pane":
        print(json.dumps(asyncio.run(measure_pane(15, args.chunk_kib))))
        return 0
    if args.one:
        r = asyncio.run(measure(args.one, n_hosts=args.hosts, seconds=args.seconds,
                                rate_mb=args.rate_mb, chunk_kib=args.chunk_kib,
                                poll_interval=args.poll_interval))
        print(json.dumps(r))
        return 0
    runs: list[dict[str, Any]] = []
    for i in range(args.runs):
        for v in args.variants:
            r = one_run(v, args)
            runs.append(r)
            if v == "pane":
                print(f"run {i + 1} pane: old {r['old_mb_s']:.0f} MB/s, new "
                      f"{r['new_mb_s']:.0f} MB/s", flush=True)
                continue
            print(f"run {i + 1} {v}: " + "; ".join(
                f"{p['name']} key {p['key_median_ms']:.1f}/{p['key_p95_ms']:.1f} ms "
                f"fps {p['fps']:.0f} taken {p['taken_mb_s']:.1f} MB/s "
                f"stall {p['stall_max_ms']:.0f} ms" for p in r["phases"])
                  + f"; HWM {r['hwm_mb']:.0f} MB", flush=True)
    Path("/tmp/bench-tui-runs.json").write_text(json.dumps(runs))
    text = report(runs, args)
    print(text)
    if not args.no_write:
        write_section("tui", text)
    return 0


def med(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]  # NaN: no key repainted in a phase
    return statistics.median(values) if values else float("nan")


def report(runs: list[dict[str, Any]], args: argparse.Namespace) -> str:
    apps = [r for r in runs if r["variant"] != "pane"]
    panes = [r for r in runs if r["variant"] == "pane"]
    variants = [v for v in args.variants if v != "pane"]
    label = {"app": "app (as in the tree)"}
    rate = f"{args.rate_mb:g} MB/s"
    lines = [
        f"Measured by `bench/tui.py` on {machine()}; Textual {textual_version()}; "
        f"{args.runs} runs per variant, interleaved, one process each; medians over runs; "
        f"load average {os.getloadavg()[0]:.1f} at the end (a shared machine: absolute "
        "figures are pessimistic, the ratios between interleaved variants hold). "
        f"{args.hosts} hosts cloned from the recorded scenarios, each polled every "
        f"{args.poll_interval:g} s ({(args.hosts - 1) / args.poll_interval:.0f} HostChanged/s); "
        f"terminal {SIZE[0]}x{SIZE[1]}, headless, each frame also encoded to the bytes a "
        f"terminal would get. Phases of {args.seconds:g} s: *idle* (polls only), *stream* "
        f"(+ the selected job's log fed at {rate} in {args.chunk_kib} KiB snapshots), *flood* "
        "(+ fed as fast as the loop lets the feeder run).",
        "",
        "Key-to-repaint: a `j`/`k` key event handed to the driver (as a terminal's input "
        "thread does) until the end of the first `App._display` whose frame holds the moved "
        "hosts-table cursor. Stall: lateness of a 5 ms ticker on the app's event loop. "
        "Log taken: bytes LogTail consumed as lines (skipped = bytes it never saw because "
        "polls merged while the screen was busy).",
        "",
        "| variant | phase | key median | key p95 | key max | frames/s | log fed | log taken "
        "| skipped | max stall | polls fed/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for v in variants:
        rs = [r for r in apps if r["variant"] == v]
        if not rs:
            continue
        for k, name in enumerate(("idle", "stream", "flood")):
            ph = [r["phases"][k] for r in rs]

            def m(key: str, ph: list[dict[str, Any]] = ph) -> float:
                return med([p[key] for p in ph])

            misses = sum(p["key_misses"] for p in ph)
            miss = f" ({misses} keys > 1 s)" if misses else ""
            lines.append(
                f"| {label[v]} | {name} | {m('key_median_ms'):.1f} ms | "
                f"{m('key_p95_ms'):.1f} ms | {m('key_max_ms'):.0f} ms{miss} | "
                f"{m('fps'):.0f} | {m('fed_mb_s'):.1f} MB/s | {m('taken_mb_s'):.1f} MB/s | "
                f"{m('skipped_mb_s'):.1f} MB/s | {m('stall_max_ms'):.0f} ms | "
                f"{m('polls_s'):.0f} |")
    hwm = {v: med([r["hwm_mb"] for r in apps if r["variant"] == v]) for v in variants}
    lines += ["", "Peak RSS (VmHWM, whole process, 10k-line log ring full): " + ", ".join(
        f"{label[v]} {hwm[v]:.0f} MB" for v in variants if not math.isnan(hwm[v])) + "."]
    if panes:
        old = med([r["old_mb_s"] for r in panes])
        new = med([r["new_mb_s"] for r in panes])
        old_ms = med([r["old_ms"] for r in panes])
        new_ms = med([r["new_ms"] for r in panes])
        lines += [
            "",
            f"The log pane alone (`LogTail.append_chunk` of {args.chunk_kib} KiB chunks of "
            f"{panes[0]['lines_per_chunk']} lines, in the mounted app, old and new splitter "
            "alternating chunk by chunk):",
            "",
            "| LogTail splitter | per chunk | MB/s | new ÷ old time |",
            "|---|---|---|---|",
            f"| per-line sanitize of every line (ec3691b) | {old_ms:.1f} ms | {old:.0f} | 1 |",
            f"| batch sanitize of the lines the 10k ring keeps | {new_ms:.1f} ms | {new:.0f} | "
            f"{new_ms / old_ms:.2f} |",
        ]
    lines += ["", "Targets (issue 6): key-to-repaint < 50 ms, log >= 50 MB/s absorbed with no "
              "stall over 100 ms, RSS < 200 MB. Verdict (key: p95 in idle and stream; log and "
              "stall: the stream phase):", ""]
    for v in variants:
        rs = [r for r in apps if r["variant"] == v]
        if not rs:
            continue
        key = max(med([r["phases"][k]["key_p95_ms"] for r in rs]) for k in (0, 1))
        taken = med([r["phases"][1]["taken_mb_s"] for r in rs])
        stall = med([r["phases"][1]["stall_max_ms"] for r in rs])

        def ok(good: bool) -> str:
            return "met" if good else "**missed**"

        lines.append(
            f"- {label[v]}: key {key:.0f} ms {ok(key < 50)}; log {taken:.1f} MB/s "
            f"{ok(taken >= 50)}; stall {stall:.0f} ms {ok(stall <= 100)}; RSS "
            f"{hwm[v]:.0f} MB {ok(hwm[v] < 200)}.")
    lines += ["", FINDINGS.strip(), "",
              f"Reproduce: `.venv/bin/python bench/tui.py --runs {args.runs} --seconds "
              f"{args.seconds:g}` (about {int(args.runs * (3.5 * args.seconds + 25))} s)."]
    return "\n".join(lines)


def textual_version() -> str:
    from importlib.metadata import version

    return version("textual")


FINDINGS = """
What made the difference (cProfile): the first cut of the room did O(hosts) work on every
poll (all 200 host rows rebuilt, the DataTable cleared and refilled, the danger clocks of every
host recomputed), so 200 hosts polled every 5 s wanted more CPU than the loop had; measured
by this bench at 3c8dbff's parent, on a machine loaded to 5.5 on 2 cores: key p95 1184 ms, log
3.4 MB/s, stalls of 1.4 s. Now (tui/room/app.py, widgets/rowtable.py): with more than 20 hosts the
hosts table, banner and alerts are redrawn at most every 0.5 s; tables update only the cells
that changed; the doctor sees each poll of one host, not the fleet; a snapshot's log chunk is
decoded once however often the panes redraw; and the log pane sanitizes a chunk in one pass,
only the lines its 10k ring keeps (last table).
"""


if __name__ == "__main__":
    sys.exit(main())
