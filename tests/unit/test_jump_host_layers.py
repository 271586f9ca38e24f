"""The jump host's layering (docs/ARCHITECTURE.md "Rules"), checked on every module under the
folders, sub-packages included:

- rules/ and present/ are pure: importing them loads neither asyncssh nor transport/ nor
  fleet/ (checked in a fresh interpreter through sys.modules), and they start no process;
- only transport/ imports asyncssh; processes are started only by transport/ (ssh, rsync,
  the local helper) and room/commands.py (the user's own notify and teardown commands);
- widgets/ do no I/O and import nothing of gpuroom but tui/present/ and their siblings.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

TUI = ROOT / "tui"
PURE = ("rules", "present")
# Calls that start a process, by the name they are reached through.
SPAWNERS = {
    "subprocess": {"Popen", "call", "run", "check_call", "check_output", "getoutput"},
    "os": {"system", "popen", "execv", "execvp", "execvpe", "spawnv", "fork", "posix_spawn"},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "pty": {"spawn", "fork"},
}
MAY_SPAWN = ("tui/transport/", "tui/room/commands.py")
# What a widget may import besides the standard library's pure modules.
WIDGET_IMPORTS = ("textual", "rich", "gpuroom.tui.present", "gpuroom.widgets",
                  "__future__", "dataclasses", "typing", "collections", "itertools", "math",
                  "re", "time", "bisect", "functools")


def _modules(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def _spawn_calls(tree: ast.AST) -> list[str]:
    """``subprocess.run(...)``, ``asyncio.create_subprocess_exec(...)``, ``os.system(...)``."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.attr in SPAWNERS.get(node.func.value.id, ())):
            found.append(f"{node.func.value.id}.{node.func.attr} (line {node.lineno})")
        if isinstance(node, ast.ImportFrom) and node.module in SPAWNERS:
            found += [f"from {node.module} import {a.name}" for a in node.names
                      if a.name in SPAWNERS[node.module]]
    return found


@pytest.mark.parametrize("layer", PURE)
def test_pure_layers_load_no_ssh_and_no_transport(layer: str) -> None:
    modules = [f"gpuroom.tui.{layer}." + p.stem for p in _modules(TUI / layer)
               if p.stem != "__init__"]
    assert modules, layer
    code = (f"import sys\nfor m in {modules!r}:\n    __import__(m)\n"
            "import json\nprint(json.dumps(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout
    loaded = json.loads(out)
    bad = [m for m in loaded if m.split(".")[0] == "asyncssh"
           or m.startswith(("gpuroom.tui.transport", "gpuroom.tui.fleet", "gpuroom.tui.room",
                            "gpuroom.tui.cli"))]
    assert not bad, f"importing tui/{layer}/ loads {bad[:8]}"


def test_only_transport_imports_asyncssh() -> None:
    offenders = [_rel(p) for folder in ("tui", "widgets", "profiles", "remote")
                 for p in _modules(ROOT / folder)
                 if any(n.split(".")[0] == "asyncssh" for n in _imports(ast.parse(p.read_text())))
                 and not _rel(p).startswith("tui/transport/")]
    assert not offenders, offenders


def test_processes_are_started_only_by_transport_and_the_users_commands() -> None:
    offenders = {}
    for folder in ("tui", "widgets", "profiles"):
        for path in _modules(ROOT / folder):
            if _rel(path).startswith(MAY_SPAWN):
                continue
            calls = _spawn_calls(ast.parse(path.read_text()))
            if calls:
                offenders[_rel(path)] = calls
    assert not offenders, offenders


def test_the_spawn_check_sees_each_way_of_starting_a_process() -> None:
    source = ("import asyncio, os, subprocess\nfrom subprocess import Popen\n"
              "asyncio.create_subprocess_exec('x')\nsubprocess.call(['x'])\nos.system('x')\n"
              "asyncio.run(main())\n")
    assert len(_spawn_calls(ast.parse(source))) == 4  # asyncio.run starts no process


def test_widgets_import_only_present_and_do_no_io() -> None:
    offenders = {}
    for path in _modules(ROOT / "widgets"):
        tree = ast.parse(path.read_text())
        bad = sorted(n for n in _imports(tree)
                     if not any(n == a or n.startswith(a + ".") for a in WIDGET_IMPORTS))
        opens = [f"open (line {n.lineno})" for n in ast.walk(tree)
                 if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                 and n.func.id == "open"]
        if bad or opens:
            offenders[_rel(path)] = bad + opens
    assert not offenders, offenders
