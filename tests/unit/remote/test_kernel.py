"""Kernel-log findings (remote/kernel.py) on every real capture in fixtures/dmesg_xid and dmesg_oom.

The ``collect`` tests replay the same captures through tests/fakes/dmesg (the kernel ring is the
hardware-adjacent boundary this machine cannot drive), and also run the machine's real dmesg.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from paths import FIXTURES, ROOT

from gpuroom.remote import kernel
from gpuroom.remote.kernel import KernelLogParser, parse_kernel_log

FAKE_DMESG = ROOT / "tests" / "fakes" / "dmesg"


def capture(rel: str) -> str:
    """The verbatim output below a fixture's '---' header line."""
    text = (FIXTURES / rel).read_text(encoding="utf-8")
    return text.split("\n---\n", 1)[1]


def xids(events: list[dict[str, Any]]) -> list[tuple[int, str | None, int | None, str | None]]:
    return [(e["code"], e["pci"], e["pid"], e["process"]) for e in events if e["kind"] == "xid"]


def ooms(events: list[dict[str, Any]]) -> list[tuple[int, str, bool]]:
    return [(e["pid"], e["process"], e["memcg"]) for e in events if e["kind"] == "oom"]


# (code, pci, pid, process) per Xid line, in order.
XID_EXPECTED: dict[str, list[tuple[int, str | None, int | None, str | None]]] = {
    "bumblebee608-old-xid44-xid31.txt": [
        (44, "0000:08:00", None, None), (31, "0000:08:00", None, None)],
    "bumblebee677-old-xid32-xid31.txt": [
        (32, "0000:01:00", None, None), (32, "0000:01:00", None, None),
        (31, "0000:01:00", None, None)],
    "dxvk1027-driver418-xid31-13-32.txt": [
        (31, "0000:01:00", None, None), (31, "0000:01:00", None, None)]
        + [(13, "0000:01:00", None, None)] * 4 + [(32, "0000:01:00", None, None)],
    "dxvk1799-journalctl-k-driver450-xid31.txt": [(31, "0000:c1:00", 12890, None)] * 2,
    "gpud1174-1160-kmsg-xid144-145-149-94.txt": [
        (149, "0019:01:00", None, None), (149, "0000:00:00", None, None),
        (145, "0018:01:00", None, None), (94, "0000:9b:00", 1234, "python3"),
        (144, "0000:01:00", None, None), (149, "0000:00:00", None, None)],
    # pid='<unknown>', name=<unknown> is "not known", not a process called "<unknown>".
    "gpud46-dmesg-ctime-xid13-xid109.txt": [(13, "0000:cb:00", None, None)] * 3
        + [(109, "0000:cb:00", 1797828, "pt_main_thread")],
    "nvsentinel155-driver570-fallen-off-bus-multiline-no-xid.txt": [],
    # "caused by previous Xid 149" must not count as a second Xid.
    "ogkm1150-driver590-xid45-caused-by-previous-xid.txt": [
        (45, "0000:dc:00", 1818990, "python3"), (45, "0000:ed:00", 1818992, "python3"),
        (45, "0000:ba:00", 1818989, "python3"), (45, "0000:97:00", 1818987, "python3"),
        (45, "0000:dc:00", 1818990, "python3"), (45, "0000:ba:00", 1818989, "python3"),
        (45, "0000:ed:00", 1818992, "python3")],
    "vllm5901-a800-xid13-esr-burst.txt": [(13, "0000:43:00", None, None)] * 6,
}

# (pid, process, memcg) per kill (one event per kill, see remote/kernel.py's docstring).
OOM_EXPECTED: dict[str, list[tuple[int, str, bool]]] = {
    "bigleak2-user-slice-no-timestamps.txt": [(4045, "bigleak2", True)],
    # Global OOM; the process literally named "(resolved)" prints as "((resolved))".
    "docker-for-linux-1001-global-oom-journal.txt": [
        (15784, "python3", False), (15925, "(resolved)", False),
        (15783, "python3", False), (15934, "(resolved)", False)],
    "gpud70-cri-containerd-journal-constraint-memcg.txt": [(461754, "pt_main_thread", True)],
    # 3.10: "Kill process 24572 ... or sacrifice child" then "Killed process 28438": one kill.
    "kubernetes-56891-rhel7-kernel310-old-format.txt": [(28438, "java", True)],
    "mini-container-constraint-memcg.txt": [(184256, "sh", True)],
    "pg-exporter-cgroup-constraint-memcg.txt": [(11700, "postgres", True)],
    "syzkaller-memcg-limit0.txt": [(23766, "syz-executor3", True)],
}


def test_every_xid_capture_has_expectations() -> None:
    assert sorted(p.name for p in (FIXTURES / "dmesg_xid").iterdir()) == sorted(XID_EXPECTED)
    assert sorted(p.name for p in (FIXTURES / "dmesg_oom").iterdir()) == sorted(OOM_EXPECTED)


@pytest.mark.parametrize("name", sorted(XID_EXPECTED))
def test_xid_capture(name: str) -> None:
    events = parse_kernel_log(capture("dmesg_xid/" + name))
    assert xids(events) == XID_EXPECTED[name]
    assert ooms(events) == []
    for event in events:
        assert event["line"] in capture("dmesg_xid/" + name)


@pytest.mark.parametrize("name", sorted(OOM_EXPECTED))
def test_oom_capture(name: str) -> None:
    events = parse_kernel_log(capture("dmesg_oom/" + name))
    assert ooms(events) == OOM_EXPECTED[name]
    assert [e for e in events if e["kind"] != "oom"] == []


def test_fallen_off_the_bus_without_xid_is_one_gpu_lost_event() -> None:
    events = parse_kernel_log(
        capture("dmesg_xid/nvsentinel155-driver570-fallen-off-bus-multiline-no-xid.txt"))
    assert [(e["kind"], e["pci"], e["ts"]) for e in events] == [
        ("gpu_lost", "0000:b3:00", 1843.308145)]
    assert events[0]["line"].count("\n") == 2  # the three physical lines, joined
    assert "fallen off the bus" in events[0]["line"]


def test_xid_79_and_its_fallen_off_the_bus_line_are_one_finding() -> None:
    # The Xid-79 line followed by the driver's own lost-GPU line for the same device.
    text = ("[  10.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=99, name=python, "
            "GPU has fallen off the bus.\n"
            "[  10.000002] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n")
    events = parse_kernel_log(text)
    assert [(e["kind"], e.get("code")) for e in events] == [("xid", 79)]


def test_timestamps_in_each_prefix_style() -> None:
    dmesg = parse_kernel_log(capture("dmesg_xid/vllm5901-a800-xid13-esr-burst.txt"))
    assert dmesg[0]["ts"] == 93297.027938
    syslog = parse_kernel_log(capture("dmesg_oom/docker-for-linux-1001-global-oom-journal.txt"))
    assert [e["ts"] for e in syslog] == [518.050606, 518.061172, 518.070786, 518.078584]
    # ctime (dmesg -T), "kernel:"-only and bare kmsg bodies carry no monotonic stamp.
    for rel in ("dmesg_xid/gpud46-dmesg-ctime-xid13-xid109.txt",
                "dmesg_xid/ogkm1150-driver590-xid45-caused-by-previous-xid.txt",
                "dmesg_xid/gpud1174-1160-kmsg-xid144-145-149-94.txt"):
        assert {e["ts"] for e in parse_kernel_log(capture(rel))} == {None}


def test_old_format_kill_keeps_the_selected_parent() -> None:
    rel = "dmesg_oom/kubernetes-56891-rhel7-kernel310-old-format.txt"
    (event,) = parse_kernel_log(capture(rel))
    assert event["selected_pid"] == 24572
    assert event["line"].endswith("Killed process 28438 (java) total-vm:20255636kB, "
                                  "anon-rss:466160kB, file-rss:13684kB")


def test_reports_back_to_back_stay_separate_kills() -> None:
    text = (capture("dmesg_oom/mini-container-constraint-memcg.txt")
            + capture("dmesg_oom/pg-exporter-cgroup-constraint-memcg.txt"))
    assert ooms(parse_kernel_log(text)) == [(184256, "sh", True), (11700, "postgres", True)]


def _index_totals() -> tuple[int, Counter[int], int, dict[str, int]]:
    index = (FIXTURES / "INDEX.md").read_text(encoding="utf-8")
    m = re.search(r"Xid lines = (\d+) \(codes: \{([^}]*)\}\); OOM kill/constraint lines = (\d+)",
                  index)
    assert m is not None
    codes = Counter({int(k): int(v) for k, v in re.findall(r"(\d+): (\d+)", m.group(2))})
    declared = {d: int(n) for d, n in re.findall(r"^## (\w+)/ .* - (\d+) files$", index, re.M)}
    return int(m.group(1)), codes, int(m.group(3)), declared


def test_xid_total_reconciled_with_index() -> None:
    """INDEX.md counts 52 Xid lines; the 9 captures present hold 37.

    INDEX's dmesg_xid header says 13 files but its table lists, and the folder holds, only 9:
    the 15 missing lines (8x Xid 45, 3x 31, and one each of 62, 79, 137, 145) belong to the 4
    captures that are not in the folder. Every code we find is within INDEX's count, and the
    codes we find exactly (13, 32, 44, 94, 109, 144, 149) agree with it.
    """
    total, codes, _, declared = _index_totals()
    ours = Counter(e["code"] for name in XID_EXPECTED
                   for e in parse_kernel_log(capture("dmesg_xid/" + name)) if e["kind"] == "xid")
    assert (total, sum(ours.values())) == (52, 37)
    assert declared["dmesg_xid"] == 13 and len(XID_EXPECTED) == 9
    assert all(ours[code] <= n for code, n in codes.items())
    assert set(ours) <= set(codes)
    assert codes - ours == Counter({45: 8, 31: 3, 62: 1, 79: 1, 137: 1, 145: 1})


def test_oom_total_reconciled_with_index() -> None:
    """INDEX.md counts 18 OOM kill/constraint lines; the captures hold 14 such lines, 10 kills.

    The 7 captures have 14 lines that name a victim (oom-kill:constraint, Kill process,
    Killed process) plus 4 oom_reaper "reaped process" lines: 14 + 4 = 18 reproduces INDEX's
    number (its header also declares 10 files where 7 are present, so it may count lines from
    absent captures instead; the folder cannot tell). A reaped line is the aftermath of a kill
    already counted, and a constraint line and its Killed line are one kill, so the parser
    reports 10 kills.
    """
    _, _, index_lines, declared = _index_totals()
    bodies = [capture("dmesg_oom/" + name) for name in OOM_EXPECTED]
    lines = [ln for body in bodies for ln in body.splitlines()]
    victim = [ln for ln in lines
              if re.search(r"oom-kill:constraint|Kill process|Killed process", ln)]
    reaped = [ln for ln in lines if "oom_reaper: reaped process" in ln]
    assert (len(victim), len(reaped), index_lines) == (14, 4, 18)
    assert declared["dmesg_oom"] == 10 and len(OOM_EXPECTED) == 7
    kills = sum(len(ooms(parse_kernel_log(body))) for body in bodies)
    assert kills == sum(len(v) for v in OOM_EXPECTED.values()) == 10


def test_parser_bound_and_cursor() -> None:
    parser = KernelLogParser(keep=4, after=93297.029837)
    for line in capture("dmesg_xid/vllm5901-a800-xid13-esr-burst.txt").splitlines():
        parser.feed(line)
    assert [e["ts"] for e in parser.finish()] == [93297.031618, 93297.040286, 93297.042086,
                                                   93297.043905]
    assert (parser.counts["xid"], parser.dropped, parser.last_ts) == (4, 0, 93297.043905)
    small = KernelLogParser(keep=2)
    for line in capture("dmesg_xid/vllm5901-a800-xid13-esr-burst.txt").splitlines():
        small.feed(line)
    assert (len(small.finish()), small.dropped, small.counts["xid"]) == (2, 4, 6)


def test_oom_report_split_by_the_cursor_is_not_counted_twice() -> None:
    body = capture("dmesg_oom/mini-container-constraint-memcg.txt")
    first = KernelLogParser()
    first.feed(body.splitlines()[0])
    assert ooms(first.finish()) == [(184256, "sh", True)]
    rest = KernelLogParser(after=first.last_ts)
    for line in body.splitlines():
        rest.feed(line)
    assert rest.finish() == []


# ---- collect(): through the fake dmesg replaying captures, and the real one ----

VLLM = "dmesg_xid/vllm5901-a800-xid13-esr-burst.txt"


@pytest.fixture
def fake_dmesg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    argv_log = tmp_path / "argv"
    monkeypatch.setenv("GPUROOM_DMESG", str(FAKE_DMESG))
    monkeypatch.setenv("GPUROOM_FAKE_DMESG_CAPTURE", str(FIXTURES / VLLM))
    monkeypatch.setenv("GPUROOM_FAKE_DMESG_ARGV", str(argv_log))
    return argv_log


def _section(request: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = kernel.collect(None, request or {})
    assert list(doc) == ["kernel"]
    section = doc["kernel"]
    assert {"log", "source", "detail", "events", "counts", "dropped", "cursor"} <= set(section)
    return section


def test_collect_replays_capture_and_returns_cursor(fake_dmesg: Path) -> None:
    section = _section()
    assert (section["log"], section["source"], section["detail"]) == ("ok", "dmesg", None)
    assert xids(section["events"]) == XID_EXPECTED[VLLM.split("/")[1]]
    assert section["cursor"] == {"boot_id": kernel._boot_id(), "ts": 93297.043905}
    assert fake_dmesg.read_text().splitlines() == ["--kernel --nopager"]


def test_collect_cursor_returns_only_later_events(fake_dmesg: Path) -> None:
    boot_id = kernel._boot_id()
    section = _section({"kernel_cursor": {"boot_id": boot_id, "ts": 93297.031618}})
    assert [e["ts"] for e in section["events"]] == [93297.040286, 93297.042086, 93297.043905]
    again = _section({"kernel_cursor": section["cursor"]})
    assert (again["events"], again["cursor"], again["cursor_reset"]) == (
        [], section["cursor"], False)


def test_collect_cursor_from_another_boot_is_discarded(fake_dmesg: Path) -> None:
    section = _section({"kernel_cursor": {"boot_id": "not-this-boot", "ts": 99999999.0}})
    assert (len(section["events"]), section["cursor_reset"]) == (6, True)


def test_collect_bounds_events(fake_dmesg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel, "MAX_EVENTS", 4)
    section = _section()
    assert (len(section["events"]), section["dropped"], section["counts"]["xid"]) == (4, 2, 6)
    assert section["events"][-1]["ts"] == 93297.043905


def test_collect_denied_is_an_answer(fake_dmesg: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUROOM_FAKE_DMESG_MODE", "denied")
    section = _section()
    assert (section["log"], section["events"]) == ("denied", [])
    assert section["detail"] == "dmesg: read kernel buffer failed: Operation not permitted"


def test_collect_falls_back_for_busybox_dmesg(fake_dmesg: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUROOM_FAKE_DMESG_MODE", "busybox")
    section = _section()
    assert (section["log"], len(section["events"])) == ("ok", 6)
    assert fake_dmesg.read_text().splitlines() == ["--kernel --nopager", ""]


def test_collect_gives_up_at_the_deadline(fake_dmesg: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUROOM_FAKE_DMESG_MODE", "hang")
    monkeypatch.setattr(kernel, "DEADLINE_S", 0.3)
    section = _section()
    assert (section["log"], section["events"]) == ("partial", [])
    assert "did not finish" in section["detail"]


def test_collect_unrunnable_dmesg_is_an_error_answer(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    broken = tmp_path / "dmesg"
    broken.write_bytes(b"\x00\x01not an executable")
    broken.chmod(0o755)
    monkeypatch.setenv("GPUROOM_DMESG", str(broken))
    section = _section()
    assert (section["log"], section["events"]) == ("error", [])
    assert section["detail"].startswith("cannot run " + str(broken))


def test_collect_reads_kmsg_records_without_dmesg(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    # The nvsentinel capture as /dev/kmsg would hold it: one record per message, its
    # continuation lines \x0a-escaped, plus a userspace record that --kernel would skip.
    records = []
    for line in capture(
            "dmesg_xid/nvsentinel155-driver570-fallen-off-bus-multiline-no-xid.txt").splitlines():
        m = re.match(r"\[ *(\d+)\.(\d+)\] (.*)", line)
        if m:
            records.append([int(m.group(1)) * 1_000_000 + int(m.group(2)), m.group(3)])
        else:
            records[-1][1] += "\\x0a" + line.strip()
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("".join(f"4,{i},{usec},-;{msg}\n SUBSYSTEM=pci\n"
                            for i, (usec, msg) in enumerate(records))
                    + "14,99,1843500000,-;NVRM: The NVIDIA GPU 0000:01:00.0 fallen off the bus\n")
    monkeypatch.setenv("GPUROOM_DMESG", str(tmp_path / "no-such-dmesg"))
    monkeypatch.setattr(kernel, "KMSG_PATH", str(kmsg))
    section = _section()
    assert (section["log"], section["source"]) == ("ok", "kmsg")
    assert [(e["kind"], e["pci"], e["ts"]) for e in section["events"]] == [
        ("gpu_lost", "0000:b3:00", 1843.308145)]
    assert section["cursor"]["ts"] == 1843.439669


def test_collect_kmsg_denied(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads a mode-000 file; the dmesg fake covers the denied path")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    kmsg.chmod(0)
    monkeypatch.setenv("GPUROOM_DMESG", str(tmp_path / "no-such-dmesg"))
    monkeypatch.setattr(kernel, "KMSG_PATH", str(kmsg))
    assert (_section()["log"], _section()["events"]) == ("denied", [])


def test_real_dmesg_gives_a_valid_section(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUROOM_DMESG", raising=False)
    section = _section()
    assert section["log"] in ("ok", "denied", "unavailable")
    if section["log"] == "ok":
        assert section["source"] in ("dmesg", "kmsg")
        assert isinstance(section["cursor"]["ts"], float)
        assert section["bytes_read"] > 0 or section["source"] == "kmsg"
        again = _section({"kernel_cursor": section["cursor"]})
        assert again["log"] == "ok"
        assert all(e["ts"] is None or e["ts"] > section["cursor"]["ts"] for e in again["events"])
    else:
        assert section["events"] == [] and section["detail"]


def test_real_kmsg_gives_a_valid_section(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUROOM_DMESG", str(tmp_path / "no-such-dmesg"))
    section = _section()
    assert section["source"] == "kmsg"
    assert section["log"] in ("ok", "denied", "unavailable")
    if section["log"] == "ok":
        assert isinstance(section["cursor"]["ts"], float)


def test_probe_document_carries_the_kernel_section(fake_dmesg: Path) -> None:
    from gpuroom.remote.probe import ProbeSession

    doc = ProbeSession().snapshot({})
    assert [e for e in doc["errors"] if e["section"] == "kernel"] == []
    assert len(doc["kernel"]["events"]) == 6
