"""docs/ARCHITECTURE.md stays true: every file it names exists, and every sub-package of tui/
and every pane of widgets/ is in its table."""

from __future__ import annotations

import re

from paths import ROOT

DOC = ROOT / "docs" / "ARCHITECTURE.md"
PATH_RE = re.compile(r"`((?:tui|remote|widgets|tests|profiles|docs)/[\w/.\-\[\]]+)`")


def _named_paths(text: str) -> set[str]:
    return set(PATH_RE.findall(text))


def test_every_file_the_architecture_names_exists() -> None:
    text = DOC.read_text()
    named = _named_paths(text)
    assert len(named) > 30, named  # the doc walks a poll and the K key file by file
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert not missing, f"docs/ARCHITECTURE.md names files that do not exist: {missing}"


def test_every_sub_package_and_pane_is_described() -> None:
    text = DOC.read_text()
    packages = sorted(p.name for p in (ROOT / "tui").iterdir()
                      if p.is_dir() and (p / "__init__.py").exists())
    assert packages and all(f"`tui/{p}/`" in text for p in packages), packages
    panes = sorted(p.stem for p in (ROOT / "widgets").glob("*.py") if p.stem != "__init__")
    assert all(f"widgets/{p}.py" in text or f"`{p}.py`" in text for p in panes), panes


def test_the_path_check_sees_a_missing_file() -> None:
    assert _named_paths("see `tui/no_such_module.py` and `widgets/gpu.py`") == {
        "tui/no_such_module.py", "widgets/gpu.py"}
