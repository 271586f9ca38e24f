"""Issue 18 item 1, made structural: every CLI verb prints box text through tui/cli/tables.py,
whose every cell, header and title is inert."""

from __future__ import annotations

import ast

import pytest
from paths import ROOT

from gpuroom.tui.cli.tables import add_row, box_table, inert, print_line, print_table

CLI = ROOT / "tui" / "cli"
HOSTILE = "\x1b]52;c;cm0gLXJmIH4=\x07[bold]x[/bold]\x1b[2J\x9b31m"


def test_no_cli_verb_builds_rich_output_but_the_tables_module() -> None:
    offenders = []
    for path in sorted(CLI.glob("*.py")):
        if path.name == "tables.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rich"):
                offenders.append(f"{path.name}:{node.lineno} imports {node.module}")
            if isinstance(node, ast.Import) and any(a.name.startswith("rich")
                                                    for a in node.names):
                offenders.append(f"{path.name}:{node.lineno} imports rich")
    assert offenders == []


def test_every_cell_title_and_line_is_inert(capsys: pytest.CaptureFixture[str]) -> None:
    table = box_table("queue " + HOSTILE, ("id", HOSTILE))
    add_row(table, ("j1", (HOSTILE, "red")))
    add_row(table, (None, 3))
    print_table(table)
    print_line(HOSTILE, "yellow")
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert out.count("[bold]x[/bold]") == 4  # title, header, cell, line: shown, not applied
    assert inert(None).plain == "-" and inert((HOSTILE, "red")).style == "red"
