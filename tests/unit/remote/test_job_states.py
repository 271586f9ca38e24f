"""One job-state vocabulary, owned by the box (remote/queue_events.py; issue 16, item 2).

The runner's fold and the Slurm fold are the only writers of a job's state; the jump host
imports their names. Five copies that disagreed (the view even invented "orphaned", "error"
and "lost") are what this guards against.
"""

from __future__ import annotations

import ast
from pathlib import Path

from paths import ROOT

from gpuroom.remote.queue_events import (
    ACTIVE_STATES,
    FAILED_STATES,
    FINAL_STATES,
    LIVE_STATES,
    STATES,
)
from gpuroom.tui.present.jobs import STATE_STYLE

WRITERS = [ROOT / "remote" / name for name in ("queue_events.py", "queue_slurm.py")]


def test_the_groups_partition_the_states() -> None:
    assert set(LIVE_STATES) | set(FINAL_STATES) == set(STATES)
    assert not set(LIVE_STATES) & set(FINAL_STATES)
    assert set(ACTIVE_STATES) < set(LIVE_STATES)
    assert set(FAILED_STATES) < set(FINAL_STATES)
    assert len(STATES) == len(set(STATES))


def _literals(node: ast.expr) -> list[str]:
    """The string constants an expression can evaluate to ("a" if c else "b" is both)."""
    if isinstance(node, ast.IfExp):
        return _literals(node.body) + _literals(node.orelse)
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    return []


def _written_states(path: Path) -> list[str]:
    """Every literal a module stores as a job's state: job["state"] = "x" (or a conditional),
    the tuple form job["state"], job["reason"] = "x", None, and the "state" of a new job
    record (a dict with an "id"; a sync record's "state" is a sync's, not a job's)."""
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                pairs = (list(zip(target.elts, node.value.elts, strict=True))
                         if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple)
                         else [(target, node.value)])
                for t, v in pairs:
                    if (isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant)
                            and t.slice.value == "state"):
                        out += _literals(v)
        elif isinstance(node, ast.Dict):
            keys = {k.value: v for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant)}
            if "id" in keys and "state" in keys:
                out += _literals(keys["state"])
    return out


def test_the_folds_write_only_states_of_the_vocabulary() -> None:
    local, slurm = (_written_states(p) for p in WRITERS)
    assert set(local) == set(STATES)  # the runner's fold reaches every state
    # Slurm jobs never launch locally; their other states are the same words.
    assert set(slurm) == set(STATES) - {"launching"}


def _state_lists(path: Path) -> list[int]:
    """Lines of tuple/list/set literals naming two or more job states."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            words = [e.value for e in node.elts if isinstance(e, ast.Constant)
                     and isinstance(e.value, str) and e.value in STATES]
            if len(words) >= 2:
                lines.append(node.lineno)
    return lines


def test_the_jump_host_keeps_no_copy_of_the_vocabulary() -> None:
    copies = {str(p.relative_to(ROOT)): _state_lists(p)
              for folder in ("tui", "widgets") for p in sorted((ROOT / folder).rglob("*.py"))}
    assert {p: lines for p, lines in copies.items() if lines} == {}


def test_the_queue_pane_styles_every_state_and_nothing_else() -> None:
    assert set(STATE_STYLE) == set(STATES)
