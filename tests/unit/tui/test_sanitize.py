"""tui/sanitize.py: untrusted log bytes never reach the terminal as control sequences."""

from __future__ import annotations

import pytest

from gpuroom.tui.sanitize import (
    MAX_DISPLAY_CHARS,
    LineSplitter,
    display_line,
    display_lines,
    last_words,
    sanitize_line,
    strip_escapes,
    truncate_display,
)
from gpuroom.tui.transport.link import ExecResult

ESC = "\x1b"


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        # CSI: colours, cursor moves, erase, private modes, a cut-off final byte.
        (f"{ESC}[31mred{ESC}[0m", "red"),
        (f"a{ESC}[2J{ESC}[H{ESC}[10;20Hb", "ab"),
        (f"{ESC}[?1049h{ESC}[?25lx", "x"),
        (f"{ESC}[38;2;255;0;0mrgb", "rgb"),
        (f"end{ESC}[", "end"),
        # OSC terminated by BEL and by ST: clipboard write (OSC 52), title, hyperlink.
        (f"x{ESC}]52;c;cm0gLXJmIH4=\x07y", "xy"),
        (f"x{ESC}]0;evil title{ESC}\\y", "xy"),
        (f"{ESC}]8;;http://evil.example{ESC}\\link{ESC}]8;;{ESC}\\", "link"),
        # Unterminated OSC swallows the rest of the line rather than showing its payload.
        (f"ok{ESC}]52;c;aGVsbG8=", "ok"),
        # DCS, SOS, PM, APC strings.
        (f"a{ESC}Pq#0;2;0;0;0#0~~{ESC}\\b", "ab"),
        (f"a{ESC}Xsos{ESC}\\b", "ab"),
        (f"a{ESC}^pm{ESC}\\b", "ab"),
        (f"a{ESC}_Gf=100;AAAA{ESC}\\b", "ab"),
        # Single-character escapes and charset selection (nF).
        (f"a{ESC}cb", "ab"),
        (f"a{ESC}7{ESC}8b", "ab"),
        (f"a{ESC}(0qqq{ESC}(Bb", "aqqqb"),
        (f"lone{ESC}", "lone"),
        # 8-bit C1 forms: CSI 0x9b, OSC 0x9d ... ST 0x9c, NEL 0x85.
        ("\x9b31mz", "z"),
        ("a\x9d0;title\x9cb", "ab"),
        ("a\x85b\x90dcs\x9cc", "abc"),
        # C0 except tab; DEL; backspace tricks.
        ("tab\there", "tab\there"),
        ("bell\x07\x00nul\x08bs\x7fdel", "bellnulbsdel"),
        # Bidi overrides that would reorder what is read.
        ("safe\u202eevil\u202c", "safeevil"),
        ("\u2066iso\u2069", "iso"),
        # Plain text, including non-ASCII, passes untouched.
        ("loss 2.31 — ünïcødé 日本 ✓", "loss 2.31 — ünïcødé 日本 ✓"),
        # A field rather than a line (a job name, a path): a newline in it is dropped.
        ("two\nlines", "twolines"),
    ],
)
@pytest.mark.attack(
    "hostile text",
    "CSI, OSC 52/0/8, DCS/SOS/PM/APC, nF, 8-bit C1, C0, DEL and bidi overrides in one field")
def test_sanitize_line_removes_every_control(raw: str, shown: str) -> None:
    assert sanitize_line(raw) == shown


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("eval 12%\reval 54%\reval 100%", "eval 100%"),  # progress bar redraws
        ("done\r", "done"),  # CRLF line ending resets nothing
        ("done\r\n", "done"),
        ("abc\r", "abc"),
        (f"{ESC}[2K\rstep 9", "step 9"),
    ],
)
def test_carriage_return_is_a_line_reset(raw: str, shown: str) -> None:
    assert sanitize_line(raw) == shown


@pytest.mark.attack(
    "hostile text",
    "every byte value 0-255 through the sanitizer: no control survives")
def test_no_escape_or_control_survives_any_byte() -> None:
    """Guards the whole 8-bit range: after sanitizing, no C0 (but tab), DEL or C1 is left."""
    raw = bytes(range(256)).decode("latin-1") * 3
    out = sanitize_line(raw)
    assert not any(ord(c) < 0x20 and c != "\t" for c in out)
    assert not any(0x7F <= ord(c) <= 0x9F for c in out)


def test_strip_escapes_keeps_text_between_sequences() -> None:
    assert strip_escapes(f"{ESC}[1mbold{ESC}[22m and {ESC}[4munder{ESC}[24m") == "bold and under"


@pytest.mark.attack("hostile text", "invalid UTF-8 in a log: replacement characters, no error")
def test_invalid_utf8_becomes_replacement_char() -> None:
    assert display_line(b"ok \xff\xfe bad \xc3") == "ok \ufffd\ufffd bad \ufffd"


def test_truncate_display_marks_what_was_cut() -> None:
    assert truncate_display("short") == "short"
    long = "x" * (MAX_DISPLAY_CHARS + 10)
    out = truncate_display(long)
    assert out.startswith("x" * MAX_DISPLAY_CHARS)
    assert out.endswith("[+10 chars]")


@pytest.mark.attack("hostile text", "a 1 MB line: bounded for display")
def test_one_megabyte_line_is_bounded() -> None:
    line = display_line(b"y" * (1 << 20))
    assert len(line) < MAX_DISPLAY_CHARS + 40
    assert f"[+{(1 << 20) - MAX_DISPLAY_CHARS} chars]" in line


def test_splitter_joins_chunks_split_mid_character_and_mid_line() -> None:
    data = "héllo wörld\nsecond 日本\n".encode()
    s = LineSplitter()
    lines: list[str] = []
    for i in range(len(data)):  # worst case: one byte per chunk
        lines += s.feed(data[i : i + 1])
    assert lines == ["héllo wörld", "second 日本"]
    assert s.flush() == []


@pytest.mark.attack(
    "hostile text",
    "an escape sequence split across two log chunks: still stripped")
def test_splitter_escape_split_across_chunks_is_still_stripped() -> None:
    s = LineSplitter()
    assert s.feed(b"a\x1b]52;c;") == []
    assert s.feed(b"cm0=\x07b\n") == ["ab"]


def test_splitter_flush_and_reset() -> None:
    s = LineSplitter()
    assert s.feed(b"partial") == []
    assert s.flush() == ["partial"]
    s.feed(b"dropped")
    s.reset()
    assert s.feed(b"new\n") == ["new"]


@pytest.mark.attack(
    "hostile text",
    "a newline-free flood of log bytes: the line splitter stays bounded")
def test_splitter_bounds_a_newline_free_flood() -> None:
    s = LineSplitter(max_pending=1000)
    out: list[str] = []
    for _ in range(5):
        out += s.feed(b"z" * 400)
    assert len(out) == 1  # emitted once the 1000-byte bound was passed
    assert out[0] == "z" * 1200


# Pieces a fuzzed log is built from: plain text, every escape family, \r redraws, bidi,
# broken and whole multibyte UTF-8, C1 bytes, tabs, and lines longer than the display cap.
_PIECES = [
    b"step 12 loss 2.31 ", b"\n", b"\n", b"\t", b"\r", b"\x1b[31m", b"\x1b]52;c;aGk=\x07",
    b"\x1b]0;t\x1b\\", b"\x1bP1$q\x1b\\", b"\x1b", b"\x9b1m", b"\x9d0;x\x9c", b"\xc2\x85",
    b"\xc2\x9b31m", b"\xc2\x9d0;t\xc2\x9c", "\u2066".encode(),
    "日本".encode(), "ü".encode()[:1], b"\xff", b"\xe6\x97", "\u202e".encode(), b"\x00\x07",
    b"x" * (MAX_DISPLAY_CHARS + 3),
]


def _fuzzed_log(seed: int, n: int) -> bytes:
    import random

    rng = random.Random(seed)
    return b"".join(rng.choice(_PIECES) for _ in range(n))


@pytest.mark.parametrize("seed", range(20))
def test_display_lines_is_display_line_per_line(seed: int) -> None:
    raw = _fuzzed_log(seed, 300)
    assert display_lines(raw) == [display_line(part) for part in raw.split(b"\n")]


def test_display_lines_plain_batch_and_long_line() -> None:
    assert display_lines(b"a\tb\n\nc") == ["a\tb", "", "c"]
    out = display_lines(b"ok\n" + b"y" * (MAX_DISPLAY_CHARS + 5))
    assert out[0] == "ok" and out[1].endswith("[+5 chars]")


@pytest.mark.parametrize("seed", range(10))
def test_splitter_keep_returns_the_tail_of_what_feed_returns(seed: int) -> None:
    import random

    rng = random.Random(seed)
    data = _fuzzed_log(seed + 100, 2000)
    full, kept = LineSplitter(max_pending=5000), LineSplitter(max_pending=5000)
    pos = 0
    while pos < len(data):
        size = rng.choice([1, 7, 64, 900, 4000])
        chunk = data[pos : pos + size]
        pos += size
        keep = rng.choice([0, 1, 2, 5, 1000])
        every = full.feed(chunk)
        assert kept.feed(chunk, keep=keep) == (every[-keep:] if keep else [])
    assert kept.flush() == full.flush()


def test_last_words_is_one_safe_line_of_the_tail() -> None:
    raw = b"first\n\n\x1b[31mred\x1b[0m error\r\nlast \x07line\n"
    assert last_words(raw) == "first | red error | last line"
    assert last_words(b"x" * 1000 + b"\nend", limit=10) == "xxxx | end"


@pytest.mark.parametrize(
    ("rc", "stderr", "said"),
    [
        (3, b"boom \x1b]52;c;ZXZpbA==\x07\x1b[2J\n", "exit 3: boom"),
        (1, b"", "exit 1"),
        (None, b"killed\n", "no exit status: killed"),
    ],
)
@pytest.mark.attack("hostile text", "OSC 52 and CSI 2J in a failed helper's stderr: quoted inert")
def test_exec_failure_quotes_stderr_inert(rc: int | None, stderr: bytes, said: str) -> None:
    assert ExecResult(rc, b"", stderr).failure() == said


# ------------------------------------------------------------------ the CLI's rich tables

HOSTILE = "x\x1b]52;c;ZXZpbA==\x07\x1b[2J[/]y"


def assert_terminal_safe(out: str) -> None:
    assert "\x1b" not in out and "\x07" not in out, repr(out)
    assert "[/]" in out  # shown as text, not read as markup (which would raise)


@pytest.mark.attack(
    "hostile text",
    "OSC 52, CSI 2J and Rich markup in every cell of the status, doctor and queue tables")
def test_cli_tables_print_the_box_text_inert(capsys: pytest.CaptureFixture[str]) -> None:
    from gpuroom.tui.cli.doctor import _print
    from gpuroom.tui.cli.main import _print_table
    from gpuroom.tui.cli.queue import _print_jobs
    from gpuroom.tui.model import HostState
    from gpuroom.tui.present.banner import Danger
    from gpuroom.tui.rules.clock import ClockItem
    from gpuroom.tui.rules.doctor import Finding

    _print_table([HostState(name="box", error=HOSTILE),
                  HostState(name="up", snapshot={"host": {"hostname": HOSTILE}})])
    _print([Finding("U1", "critical", "box", HOSTILE, HOSTILE, HOSTILE)],
           [ClockItem("box", "idle", "warn", HOSTILE, 60.0)],
           [Danger("crit", HOSTILE, f"CRITICAL box: job {HOSTILE} failed")])
    _print_jobs({"queue": "default", "jobs": [
        {"id": HOSTILE, "name": HOSTILE, "state": HOSTILE, "attempts": [], "argv": [HOSTILE],
         "slurm_id": 7, "slurm_state": "PENDING", "reason": HOSTILE}]})
    assert_terminal_safe(capsys.readouterr().out)
