"""The test tree mirrors the code in folders without __init__.py, so pytest imports each test
file by its base name: two files of one name in two folders break collection of the whole
suite (seen when tests/unit and tests/system each had test_snapshot_schema.py)."""

from __future__ import annotations

from collections import Counter

from paths import TESTS


def test_test_file_names_are_unique_across_folders() -> None:
    names = Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert len(names) > 40
    assert [n for n, count in names.items() if count > 1] == []
