"""Property-based fuzzing of pull planning's path guard (tui/transport/pull.py
safe_local_path): whatever path a box's manifest names, the local file lands strictly under
the pull's root, or the file is refused; a symlink under the root is never followed out."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.hostile_docs import PATHS, examples
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuroom.tui.transport.pull import safe_local_path

COMPONENTS = st.one_of(st.sampled_from(("..", ".", "", "out", "ckpt", "~", "a\x00", "a\\..",
                                        "link", "link2", "..\u2215x", "%2e%2e", " ")),
                       st.text(max_size=8))
manifest_paths = st.one_of(
    st.sampled_from(PATHS),
    st.lists(COMPONENTS, min_size=1, max_size=6).map("/".join),
    st.lists(COMPONENTS, min_size=1, max_size=4).map(lambda p: "/" + "/".join(p)),
    st.text(max_size=40),
)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pull root holding a symlink to a directory outside it, and one to the root's
    parent: a path through either must be refused."""
    base = tmp_path_factory.mktemp("pull")
    outside = base / "outside"
    outside.mkdir()
    into = base / "into"
    into.mkdir()
    (into / "link").symlink_to(outside, target_is_directory=True)
    (into / "link2").symlink_to(base, target_is_directory=True)
    (into / "ckpt").mkdir()
    return into


@pytest.mark.attack("trust", "generated manifest paths (.., absolute, NUL, backslash, "
                    "empty components, symlinks under the root pointing out) through pull "
                    "planning's path guard")
@settings(max_examples=examples(400), deadline=None)
@given(rel=manifest_paths)
def test_no_manifest_path_lands_outside_the_root(root: Path, rel: str) -> None:
    try:
        target = safe_local_path(root, rel)
    except (OSError, ValueError):
        pytest.fail(f"safe_local_path raised on {rel!r}")  # refusing is the answer, not raising
    if target is None:
        return
    base = root.resolve()
    assert base in target.parents, (rel, target)
    assert target.resolve() == target  # nothing left to resolve outside later
    assert not target.is_relative_to(base.parent / "outside")
