"""tui/present/format.py: one way to word each quantity (issue 16, item 3)."""

from __future__ import annotations

import ast
import re

import pytest
from paths import ROOT

from gpuroom.tui.present.format import (
    fmt_age,
    fmt_bytes,
    fmt_count,
    fmt_cut,
    fmt_duration,
    fmt_hours,
    fmt_mmss,
    fmt_money,
    fmt_number,
    fmt_pct,
    fmt_progress,
    fmt_rate,
    fmt_whole,
    sparkline,
)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "-"), (-5, "0s"), (42, "42s"), (180, "3m"), (7500, "2h05m"),
     (3 * 86400 + 7200, "3d02h")],
)
def test_fmt_age(seconds: float | None, text: str) -> None:
    assert fmt_age(seconds) == text


def test_fmt_bytes_is_binary_with_iec_units() -> None:
    # The one byte style: df -h's powers of 1024 and precision, spelled KiB/GiB. The doctor
    # said "1.5 KiB" and the disk pane "1.5K" before.
    assert [fmt_bytes(n) for n in (None, 0, 512, 1536, 252 * 2**30, 84.2 * 2**30)] == [
        "-", "0B", "512B", "1.5KiB", "252GiB", "84GiB"]
    assert fmt_bytes(3 * 2**50 * 1024) == "3072PiB"  # the last unit keeps counting
    assert fmt_rate(12.5 * 2**20) == "12MiB/s" and fmt_rate(None) == "-"


def test_fmt_count_is_decimal_like_df_hi() -> None:
    assert [fmt_count(n) for n in (None, 980, 16_000, 1_200_000, 5e12)] == [
        "-", "980", "16K", "1.2M", "5000G"]


def test_durations_money_and_readings() -> None:
    assert [fmt_duration(s) for s in (40, 720, 3.5 * 3600, 4 * 86400, -3)] == [
        "40 s", "12 min", "3.5 h", "4 days", "0 s"]
    assert (fmt_hours(14400), fmt_hours(None)) == ("4.0h", "-")
    assert (fmt_mmss(41), fmt_mmss(3661)) == ("0:41", "61:01")
    assert (fmt_money(2.49, 14400), fmt_money(None, 14400)) == ("$9.96", "")
    assert [fmt_number(v) for v in (1980.0, 21.3, 7, None)] == ["1980", "21.3", "7", "?"]
    assert (fmt_whole(21.3, "W"), fmt_whole(None), fmt_whole(None, missing="?")) == (
        "21W", "-", "?")
    assert fmt_pct(99.6) == "100%" and fmt_pct(None) == "-"
    assert fmt_progress(3 << 30, 4 << 30, 95 * 2**20, 31.2) == "3.0GiB/4.0GiB 95MiB/s ETA 31s"
    assert fmt_progress(0, 1, 0.0, None).endswith("ETA ?")


def test_sparkline_scales_to_the_hardware_max() -> None:
    # A GPU stuck at half clock reads half-height even though it never changes (U23).
    assert sparkline([990.0, 990.0], top=1980) == "▅▅"
    assert sparkline([None, 1980.0], top=1980) == " █"
    assert sparkline([], top=None) == ""


UNIT_AFTER_NUMBER = re.compile(r"^ ?(B|KiB|MiB|GiB|TiB|PiB)(\b|/)")


def _unit_strings(path: str) -> list[int]:
    """Lines that print a number followed by a byte unit, or shift by 10/20/30 to scale
    bytes: a formatter of their own (a docstring or a column title naming a unit is not)."""
    tree = ast.parse((ROOT / path).read_text())
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            for before, after in zip(node.values, node.values[1:], strict=False):
                if isinstance(before, ast.FormattedValue) and isinstance(after, ast.Constant) \
                        and UNIT_AFTER_NUMBER.match(str(after.value)):
                    lines.append(node.lineno)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.RShift) \
                and isinstance(node.right, ast.Constant) and node.right.value in (10, 20, 30):
            lines.append(node.lineno)
    return lines


def test_no_other_module_formats_bytes() -> None:
    found = {}
    for folder in ("tui", "widgets"):
        for p in sorted((ROOT / folder).rglob("*.py")):
            rel = str(p.relative_to(ROOT))
            if rel == "tui/present/format.py":
                continue
            lines = _unit_strings(rel)
            if lines:
                found[rel] = lines
    assert found == {}


def test_every_cut_ends_in_an_ellipsis() -> None:
    # Issue 17 item 8: queue ls cut commands at 60 and status errors at 120 without a mark.
    assert fmt_cut("python train.py", 40) == "python train.py"
    cut = fmt_cut("python train.py --config a/very/long/path.yaml --lr 3e-4", 20)
    assert len(cut) == 20 and cut.endswith("…") and cut.startswith("python train.py --c")


def test_status_keeps_a_long_errors_fix(capsys: pytest.CaptureFixture[str]) -> None:
    from gpuroom.tui.cli.main import _print_table
    from gpuroom.tui.model import HostState

    error = "box: " + "x" * 300 + ". Fix: run ssh box true and read what it says"
    _print_table([HostState(name="box", error=error)])
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "Fix: run ssh box true and read what it says" in out
    assert "…" in out
