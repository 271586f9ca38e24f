"""tui/present/text.py is the one way text reaches Rich or Textual in the room: its Text is
never markup and carries no escape, and no pane or screen builds box text any other way."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from harness.hostile_text import MARKUP, PAYLOADS, terminal_controls
from paths import ROOT
from rich.console import Console

from gpuroom.tui.present.text import box_lines, box_text, plain
from gpuroom.tui.sanitize import MAX_DISPLAY_CHARS

SINKS = ("Label", "Static", "Option", "add_row", "update", "add_column")
FOLDERS = (ROOT / "widgets", ROOT / "tui" / "room")


@pytest.mark.attack("hostile text", "Rich markup, ANSI/OSC, C1, bidi, NUL and a 5 KB line "
                    "through the room's one constructor of box text, printed by Rich")
@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_box_text_is_literal_and_inert(payload: str) -> None:
    console = Console(width=300, record=True, force_terminal=False, file=None)
    with console.capture() as capture:
        console.print(box_text(payload, "bold"), box_lines(f"{payload}\n{payload}"))
    out = capture.get()
    assert terminal_controls(out) == []
    assert any(m in out for m in MARKUP)  # the markup shows as written
    assert len(plain(payload)) <= MAX_DISPLAY_CHARS + 20
    assert plain(payload, None) == plain(payload, 10 ** 6)
    assert plain(None) == "" and box_text(None).plain == ""


def _offences(path: Path) -> list[str]:
    """Text built from data without box_text; an f-string or concatenation handed straight
    to a markup sink; a border title that is not box_text's."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else \
                node.func.attr if isinstance(node.func, ast.Attribute) else ""
            first = node.args[0] if node.args else None
            if name == "Text" and first is not None and not isinstance(first, ast.Constant):
                found.append(f"{where}: Text(<data>): use box_text")
            if name in SINKS and any(isinstance(a, ast.JoinedStr | ast.BinOp)
                                     for a in node.args):
                found.append(f"{where}: {name}(<str>) reads markup: give it box_text(...)")
            if any(k.arg == "markup" for k in node.keywords) and name != "notify":
                found.append(f"{where}: markup=False keeps escapes: give it box_text(...)")
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr in ("border_title", "border_subtitle")
                for t in node.targets):
            v = node.value
            if not (isinstance(v, ast.Constant) or (isinstance(v, ast.Call) and isinstance(
                    v.func, ast.Name) and v.func.id == "box_text")):
                found.append(f"{where}: a border title reads markup: give it box_text(...)")
    return found


def test_panes_and_screens_build_box_text_one_way() -> None:
    paths = [p for folder in FOLDERS for p in sorted(folder.rglob("*.py"))]
    assert len(paths) > 10
    assert [o for p in paths for o in _offences(p)] == []
