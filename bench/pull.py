"""Pull throughput and resume cost: gpuroom pull vs `rsync -a --partial` vs `scp`, on loopback.

One 2 GiB file of random bytes on a real OpenSSH sshd (the test harness's box, same machine),
pulled by each tool in turn, interleaved round by round (the machine is shared and noisy), into
a fresh local dir each time. Then a pull is interrupted at 50 % (the task cancelled; the box's
sshd tree killed) and resumed, counting the bytes that crossed SFTP. Writes the `pull` section
of docs/PERFORMANCE.md. Needs root (the harness creates the box user and runs sshd).

    .venv/bin/python bench/pull.py [--size-mib 2048] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
# A user of its own so a test run on the same machine cannot wipe the box under the bench.
os.environ.setdefault("GPUROOM_TEST_USER", "gpuroombench")

from _report import machine, write_section  # noqa: E402

import gpuroom.tui.transport.link as link_mod  # noqa: E402
from gpuroom.tui.config import HostConfig  # noqa: E402
from gpuroom.tui.transport.link import HostLink, LinkError  # noqa: E402
from gpuroom.tui.transport.pull import Progress, pull  # noqa: E402
from tests.harness.sshd import ClientIdentity, SshdBox, ensure_test_user  # noqa: E402

MB = 1e6
TOOL_TIMEOUT_S = 300
# An alias for the same box that names chacha20-poly1305 first: asyncssh's own default, which
# link.py replaces with AES-GCM first when the user's ssh_config names no Ciphers.
CHACHA_ALIAS = "box-chacha"
CHACHA_CIPHERS = "chacha20-poly1305@openssh.com,aes128-gcm@openssh.com"


@dataclass
class Sample:
    seconds: float
    client_cpu: float  # this process (its threads too) and the children it waited for


@dataclass
class Bench:
    box: SshdBox
    src_dir: Path  # on the box (its user's home), absolute
    size: int
    work: Path  # local scratch
    samples: dict[str, list[Sample]] = field(default_factory=dict)

    @property
    def src(self) -> Path:
        return self.src_dir / "big.bin"


def _client_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@contextmanager
def measured(b: Bench, name: str) -> Iterator[None]:
    c0, t0 = _client_cpu(), time.perf_counter()
    yield
    b.samples.setdefault(name, []).append(
        Sample(time.perf_counter() - t0, _client_cpu() - c0))


def make_source(box: SshdBox, size: int) -> Path:
    d = Path(tempfile.mkdtemp(prefix="pullbench-", dir=box.home))
    chunk = 8 << 20
    with open(d / "big.bin", "wb") as f:
        left = size
        while left:
            n = min(chunk, left)
            f.write(os.urandom(n))
            left -= n
    uid, gid = box.identity.user.uid, box.identity.user.gid
    for p in (d, d / "big.bin"):
        os.chown(p, uid, gid)
    # Old enough that the box's manifest caches its digest (files younger than 2 s are not).
    os.utime(d / "big.bin", (time.time() - 60, time.time() - 60))
    return d


def clear_manifest_cache(box: SshdBox) -> None:
    shutil.rmtree(box.home / ".gpuroom" / "cache", ignore_errors=True)


def fresh_dir(b: Bench) -> Path:
    d = b.work / "dst"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    return d


def ssh_e(b: Bench) -> str:
    # rsync splits -e itself; shlex.join keeps a config path with spaces one word.
    return shlex.join(["ssh", "-F", str(b.box.ssh_config)])


def run_tool(argv: list[str]) -> str:
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=TOOL_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {done.returncode}: {done.stderr[-500:]}")
    return done.stdout


def link_for(b: Bench, alias: str | None = None) -> HostLink:
    return HostLink(HostConfig(name="box", ssh=alias or b.box.alias),
                    ssh_config=b.box.ssh_config)


async def gpuroom_pull(b: Bench, dst: Path, *, alias: str | None = None, method: str = "auto",
                       on_progress: Callable[[Progress], None] | None = None) -> Any:
    link = link_for(b, alias)
    try:
        return await pull(link, str(b.src_dir), dst, on_progress=on_progress,
                          load_test_torch=False, state_path=b.work / "pulls.json",
                          method=method)
    finally:
        await link.close()


def one(b: Bench, tool: str) -> None:
    dst = fresh_dir(b)
    if tool.startswith("gpuroom"):
        if tool == "gpuroom-cold":
            clear_manifest_cache(b.box)  # the usual first pull: the box hashes the file now
        alias = CHACHA_ALIAS if tool.endswith("-chacha") else None
        method = next((m for m in ("sftp", "rsync", "openssh") if f"-{m}" in tool), "auto")
        with measured(b, tool):
            result = asyncio.run(gpuroom_pull(b, dst, alias=alias, method=method))
        if not result.ok:
            raise RuntimeError(f"gpuroom pull failed: {[f.detail for f in result.files]}")
        want = "openssh" if method == "auto" else method
        if result.files[0].via != want:
            raise RuntimeError(f"{tool} went through {result.files[0].via}, not {want}: "
                               f"{result.note}")
    elif tool == "rsync":
        with measured(b, tool):
            run_tool(["rsync", "-a", "--partial", "-e", ssh_e(b),
                      f"{b.box.alias}:{b.src}", f"{dst}/"])
    elif tool == "scp":
        with measured(b, tool):
            run_tool(["scp", "-q", "-F", str(b.box.ssh_config), f"{b.box.alias}:{b.src}",
                      f"{dst}/"])
    else:
        raise ValueError(tool)
    got = next(p for p in dst.rglob("big.bin"))
    if got.stat().st_size != b.size:
        raise RuntimeError(f"{tool}: {got.stat().st_size} bytes, expected {b.size}")
    shutil.rmtree(dst, ignore_errors=True)


# ------------------------------------------------------------------ interruption and resume

class SftpCounter:
    """Bytes answered by SFTP reads: wraps the link's read path, instrumentation only."""

    def __init__(self) -> None:
        self.count = 0
        self._orig = link_mod._SftpSource.read_at
        self._patch: Any = None

    def __enter__(self) -> SftpCounter:
        orig = self._orig

        async def counting(source: Any, offset: int, length: int) -> bytes:
            data = await orig(source, offset, length)
            self.count += len(data)
            return data

        self._patch = mock.patch.object(link_mod._SftpSource, "read_at", counting)
        self._patch.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._patch.stop()


def gpuroom_interrupted(b: Bench, how: str, method: str) -> dict[str, Any]:
    """Interrupt at 50 % (cancel the task, or kill the box's sshd tree), resume, count.

    SFTP: bytes counted as read answers arrive. rsync: its own `--stats` count of bytes
    received, which gpuroom reports as the file's bytes_transferred.
    """
    dst = fresh_dir(b)
    part = dst / "big.bin.part"
    half = b.size // 2

    def stop_at_half(p: Progress) -> None:
        if p.done < half:
            return
        if how == "cancel":
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
        elif b.box.alive:
            b.box.kill_all()

    with SftpCounter() as first:
        try:
            asyncio.run(gpuroom_pull(b, dst, method=method, on_progress=stop_at_half))
            raise RuntimeError("the interrupted pull finished")
        except (asyncio.CancelledError, LinkError):
            pass
    kept = part.stat().st_size
    if how == "kill":
        b.box.start()
    with SftpCounter() as second:
        t0 = time.perf_counter()
        result = asyncio.run(gpuroom_pull(b, dst, method=method))
        resume_s = time.perf_counter() - t0
    if not result.ok:
        raise RuntimeError(f"resume failed: {[f.detail for f in result.files]}")
    shutil.rmtree(dst, ignore_errors=True)
    missing = b.size - kept
    if method == "sftp":
        second_n, wasted = second.count, first.count + second.count - b.size
    else:  # rsync: its --stats; openssh: the SFTP data answers the resume received
        second_n, wasted = result.bytes_transferred, None
    return {"kept": kept, "second": second_n, "resent": second_n - missing, "wasted": wasted,
            "via": result.files[0].via, "resume_s": resume_s}


_STATS = re.compile(r"Total bytes received: ([\d,.]+)")


def rsync_interrupted(b: Bench) -> dict[str, Any]:
    """rsync -a --partial stopped (Ctrl-C) at 50 % and run again: bytes it receives."""
    dst = fresh_dir(b)
    argv = ["rsync", "-a", "--partial", "--stats", "-e", ssh_e(b),
            f"{b.box.alias}:{b.src}", f"{dst}/"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + TOOL_TIMEOUT_S
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            # rsync writes into a hidden temp file next to the destination.
            sizes = [p.stat().st_size for p in dst.iterdir() if p.name.startswith(".big.bin")]
            if sizes and max(sizes) >= b.size // 2:
                break
            time.sleep(0.01)
        # Ctrl-C: SIGINT to rsync's whole group (both rsync processes and ssh), which
        # --partial survives; a SIGKILL would lose the partial file.
        os.killpg(proc.pid, signal.SIGINT)
    finally:
        proc.wait(timeout=60)
    kept = (dst / "big.bin").stat().st_size
    t0 = time.perf_counter()
    out = run_tool(argv)
    resume_s = time.perf_counter() - t0
    m = _STATS.search(out)
    if m is None:
        raise RuntimeError(f"no byte count in rsync --stats: {out[-400:]}")
    received = int(m.group(1).replace(",", "").replace(".", ""))
    if (dst / "big.bin").stat().st_size != b.size:
        raise RuntimeError("rsync resume produced the wrong size")
    shutil.rmtree(dst, ignore_errors=True)
    return {"kept": kept, "received": received, "resent": received - (b.size - kept),
            "resume_s": resume_s}


# ------------------------------------------------------------------------------- report

def med(xs: list[float]) -> float:
    return statistics.median(xs)


def report(b: Bench, *, rounds: int, tools: list[str], resume: dict[str, dict[str, Any]],
           rsync_resume: dict[str, Any] | None, wall_s: float) -> str:
    size_mib = b.size >> 20
    rate = {t: [b.size / s.seconds / MB for s in b.samples[t]] for t in tools}
    # Ratios per round (tools of one round ran back to back), then their median: a burst of
    # load from the neighbours hits one round, not one tool in every round.
    ratio = {t: med([rate[t][i] / rate["rsync"][i] for i in range(rounds)]) for t in tools}
    chacha = f"ssh_config `Ciphers {CHACHA_CIPHERS.split(',', maxsplit=1)[0]},...`"
    names = {
        "gpuroom-cold": "**gpuroom pull**, first pull (default `auto`: big files through "
                        "ssh's own SFTP, AES-GCM; the box hashes the file while it travels)",
        "gpuroom": "**gpuroom pull** again (the box's digest cached by size and mtime)",
        "gpuroom-sftp": "gpuroom pull, SFTP on the asyncssh link (`method=\"sftp\"`, the "
                        "previous default), AES-GCM, digest cached",
        "gpuroom-rsync": "gpuroom pull, rsync path (`method=\"rsync\"`, ssh with AES-GCM "
                         "first), digest cached",
        "gpuroom-openssh-chacha": f"gpuroom pull, `auto` (ssh's SFTP), {chacha}, digest cached",
        "gpuroom-sftp-chacha": f"gpuroom pull, SFTP on the asyncssh link, {chacha} (asyncssh's "
                               "own default order), digest cached",
        "gpuroom-rsync-chacha": f"gpuroom pull, rsync path, {chacha}, digest cached",
        "rsync": "`rsync -a --partial -e 'ssh -F cfg'` (OpenSSH's default: chacha20-poly1305)",
        "scp": "`scp -F cfg` (OpenSSH 9: SFTP protocol, chacha20-poly1305)",
    }
    lines = [
        f"Measured by `bench/pull.py` on {machine()}: one {size_mib} MiB file of random bytes "
        f"on the test harness's real OpenSSH sshd on loopback (box and jump host are the same "
        f"2 cores, so every byte is encrypted and decrypted on them), {rounds} rounds, tools "
        f"interleaved, order rotated each round. The machine is shared with other engineers' "
        f"test runs: single runs vary by up to 2x, so read the medians and per-round ratios. "
        f"Whole run {wall_s:.0f} s.",
        "",
        "| tool | median MB/s | min-max MB/s | ÷ rsync (median of per-round ratios) | "
        "CPU s/GiB, jump side |",
        "|---|---|---|---|---|",
    ]
    gib = b.size / (1 << 30)
    for t in tools:
        ss = b.samples[t]
        lines.append(
            f"| {names[t]} | {med(rate[t]):.0f} | {min(rate[t]):.0f}-{max(rate[t]):.0f} | "
            f"{ratio[t]:.2f}x | {med([s.client_cpu for s in ss]) / gib:.2f} |")
    verdict = "met" if min(ratio["gpuroom"], ratio["gpuroom-cold"]) >= 0.9 else "missed"
    chacha_rows = [t for t in tools if t.endswith("-chacha")]
    lines += [
        "",
        f"Target (issue 8): gpuroom pull >= 0.9x rsync throughput: **{verdict}** "
        f"({ratio['gpuroom-cold']:.2f}x on a first pull, {ratio['gpuroom']:.2f}x with the "
        f"box's digest cached). gpuroom's time includes what rsync does not do: an ssh login "
        "for the link, the helper check, the box's manifest (big files listed by size and "
        "mtime only), a second ssh login for ssh's SFTP session, the box's sha256 of the file "
        "(a second helper call, run while the bytes travel; cached by size and mtime, so a "
        "second pull skips it) and the jump-side sha256 of the received file (a thread reads "
        "the .part behind the writer). CPU is the bottleneck here, not the link: box and jump "
        "host are the same 2 cores, so both sha256 passes (about 1.2 CPU s per 2 GiB each) "
        "take their CPU from the transfer. That is why the path that moves the bytes matters: "
        "asyncssh's SFTP spends Python time on each 32 KiB SSH packet sshd sends, the OpenSSH "
        "client decrypts in C and hands the bytes over a pipe (the CPU column); rsync adds its "
        "own processes and checksums to the same ssh. AES-GCM runs on the CPU's AES "
        "instructions; chacha20-poly1305 (OpenSSH's and asyncssh's first choice, kept when "
        "the user's ssh_config names it: the chacha rows) costs more on both ends, so gpuroom "
        "puts AES-GCM first for its own connections and spawned ssh when the config names no "
        "Ciphers. Where the user's config pins chacha20, every gpuroom path is at "
        f"{min(ratio[t] for t in chacha_rows):.2f}-{max(ratio[t] for t in chacha_rows):.2f}x: "
        "the two sha256 passes no longer fit beside the cipher's cost, and the config is "
        "kept.",
        "",
        "Interrupted at 50 % and resumed (the resume is a new `pull()` on a new connection; "
        "bytes counted where SFTP read answers arrive):",
        "",
        "| path, interruption | kept in .part | bytes received by the resume | re-sent "
        "(received - missing) | re-sent % of file | lost in flight at the interruption | "
        "resume s |",
        "|---|---|---|---|---|---|---|",
    ]
    whats = {"cancel": "pull task cancelled", "kill": "box sshd tree killed (SIGKILL)"}
    resent_ok = True
    for key, r in resume.items():
        method, how = key.split("/")
        pct = 100.0 * r["resent"] / b.size
        resent_ok = resent_ok and pct < 1.0
        lost = "-" if r["wasted"] is None else (
            f"{max(r['wasted'], 0) / MB:.1f} MB ({100.0 * max(r['wasted'], 0) / b.size:.2f} %)")
        counted = {"sftp": "SFTP read answers", "openssh": "SFTP data answers"}.get(
            method, "rsync `--stats`")
        lines.append(
            f"| {method}, {whats[how]} | {r['kept'] / MB:.0f} MB | {r['second'] / MB:.1f} MB "
            f"({counted}) | {r['resent']} B | {pct:.3f} % | {lost} | {r['resume_s']:.1f} |")
    if rsync_resume is not None:
        r = rsync_resume
        lines.append(
            f"| `rsync -a --partial` stopped by Ctrl-C (SIGINT), run again | "
            f"{r['kept'] / MB:.0f} MB | {r['received'] / MB:.1f} MB received | "
            f"{r['resent']} B | {100.0 * r['resent'] / b.size:.3f} % | - | "
            f"{r['resume_s']:.1f} |")
    lines += [
        "",
        f"Target: re-sent < 1 % of the file: **{'met' if resent_ok else 'missed'}**. Every "
        "path resumes from the .part's size (SFTP reads from that offset; rsync `--append`): "
        "the rsync path's re-sent bytes are its protocol overhead (file list, checksums), and "
        "on the SFTP path blocks that were in flight when the pull stopped are the only "
        "bytes that cross twice (the lost-in-flight column; at most the pipelining window). "
        "`rsync -a --partial` resumes with its delta algorithm instead: few bytes re-sent, "
        "but both ends read and checksum the whole file again.",
        "",
        "Reproduce: `sudo .venv/bin/python bench/pull.py` (root: the harness runs sshd and "
        "creates the box user; 4-8 minutes depending on the load).",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mib", type=int, default=2048)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-write", action="store_true", help="print, do not touch the doc")
    args = parser.parse_args()
    started = time.perf_counter()
    identity = ClientIdentity.create(ensure_test_user())
    box = SshdBox.create(identity)
    work = Path(tempfile.mkdtemp(prefix="gpuroom-pullbench-"))
    tools = ["gpuroom-cold", "gpuroom", "gpuroom-sftp", "gpuroom-rsync", "gpuroom-openssh-chacha",
             "gpuroom-sftp-chacha", "gpuroom-rsync-chacha", "rsync", "scp"]
    try:
        box.start()
        box.write_ssh_config({CHACHA_ALIAS: {"Ciphers": CHACHA_CIPHERS}})
        src_dir = make_source(box, args.size_mib << 20)
        b = Bench(box, src_dir, args.size_mib << 20, work)
        one(b, "gpuroom")  # warm-up: helper deployed, file in the box's page cache
        b.samples.clear()
        for r in range(args.rounds):
            k = r % len(tools)
            for tool in tools[k:] + tools[:k]:
                one(b, tool)
                print(f"round {r} {tool}: {b.size / b.samples[tool][-1].seconds / MB:.0f} MB/s",
                      flush=True)
        resume = {f"{m}/{how}": gpuroom_interrupted(b, how, m)
                  for m in ("openssh", "rsync", "sftp") for how in ("cancel", "kill")}
        print(resume, flush=True)
        try:
            rsync_resume: dict[str, Any] | None = rsync_interrupted(b)
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            print(f"rsync resume not measured: {exc}", flush=True)
            rsync_resume = None
        print(rsync_resume, flush=True)
        text = report(b, rounds=args.rounds, tools=tools, resume=resume,
                      rsync_resume=rsync_resume, wall_s=time.perf_counter() - started)
    finally:
        box.close()
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(box.home / "pullbench", ignore_errors=True)
        for d in box.home.glob("pullbench-*"):
            shutil.rmtree(d, ignore_errors=True)
    print(text)
    if not args.no_write:
        write_section("pull", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
