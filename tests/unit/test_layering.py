"""The two sides stay apart: remote/ is stdlib-only Python 3.8 and imports nothing of the jump
host; the package installs only under gpuroom.* (the jump host's layers:
test_jump_host_layers.py)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from paths import ROOT

REMOTE_DIR = ROOT / "remote"
REMOTE = sorted(REMOTE_DIR.rglob("*.py"))  # sub-packages too: the zipapp ships them all
# Only the checkpoint module may import torch/numpy (lazily); pynvml ships inside the zipapp.
REMOTE_EXTRA_ALLOWED = {"pynvml", "torch", "numpy", "gpuroom"}
# Methods and functions added after 3.8 that a 3.8 box would fail on at run time.
# (Names that also exist on 3.8 objects, like os.readlink, are not listed.)
POST_38_ATTRS = {"removeprefix", "removesuffix", "is_relative_to", "bit_count", "to_thread",
                 "with_stem", "pairwise", "batched"}
POST_38_MODULE_ATTRS = {("functools", "cache"), ("asyncio", "to_thread"), ("math", "lcm")}


def _imports(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _jump_host_imports(tree: ast.AST, rel: Path) -> list[str]:
    """Imports that leave gpuroom.remote: gpuroom.* other than gpuroom.remote, or a relative
    import with more dots than the module's depth inside remote/ (``from .. import tui``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.ImportFrom) and node.level > len(rel.parts):
            found.append("." * node.level + (node.module or ""))
            continue
        else:
            continue
        found += [n for n in names if n.split(".")[0] == "gpuroom"
                  and n.split(".")[:2] != ["gpuroom", "remote"]]
    return found


def test_jump_host_import_check_catches_both_spellings() -> None:
    def check(source: str, rel: str) -> list[str]:
        return _jump_host_imports(ast.parse(source), Path(rel))

    assert check("from gpuroom.tui import sanitize", "x.py") == ["gpuroom.tui"]
    assert check("import gpuroom.widgets.hosts", "sub/x.py") == ["gpuroom.widgets.hosts"]
    assert check("from .. import tui", "x.py") == [".."]
    assert check("from ...tui import fleet", "sub/x.py") == ["...tui"]
    assert check("from .. import probe\nfrom gpuroom.remote import cli", "sub/x.py") == []


@pytest.mark.parametrize("path", REMOTE, ids=lambda p: p.relative_to(REMOTE_DIR).as_posix())
def test_remote_parses_as_python38_and_is_stdlib_only(path: Path) -> None:
    source = path.read_text()
    rel = path.relative_to(REMOTE_DIR).as_posix()
    tree = ast.parse(source, filename=str(path), feature_version=(3, 8))
    jump_host = _jump_host_imports(tree, path.relative_to(REMOTE_DIR))
    assert not jump_host, f"{rel} imports {jump_host} from the jump-host side"
    third_party = {
        name for name in _imports(tree)
        if name not in sys.stdlib_module_names and name not in REMOTE_EXTRA_ALLOWED
    }
    assert not third_party, f"{rel} imports {third_party}: remote/ is stdlib only"
    if rel != "checkpoint.py":
        assert not {"torch", "numpy"} & _imports(tree), f"{rel} needs torch"
    attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not attrs & POST_38_ATTRS, f"{rel} uses {attrs & POST_38_ATTRS} (3.9+)"
    module_attrs = {(n.value.id, n.attr) for n in ast.walk(tree)
                    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
    assert not module_attrs & POST_38_MODULE_ATTRS, f"{rel}: 3.9+ function"
    # PEP 604/585 spellings in annotations are fine only as strings (future import).
    if any(isinstance(n, ast.AnnAssign | ast.FunctionDef) for n in ast.walk(tree)):
        assert "from __future__ import annotations" in source or path.name == "__main__.py"


def test_distribution_installs_only_under_gpuroom() -> None:
    """No top-level tui/remote/widgets/profiles may land in site-packages."""
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = meta["tool"]["setuptools"]
    assert all(p.startswith("gpuroom.") for p in setuptools["packages"])
    # Sub-packages (gpuroom.tui.rules, ...) live under their parent's folder.
    assert {".".join(p.split(".")[:2]) for p in setuptools["packages"]} == set(
        setuptools["package-dir"])
    import gpuroom.remote
    import gpuroom.tui

    assert Path(gpuroom.tui.__file__).parent == ROOT / "tui"
    assert Path(gpuroom.remote.__file__).parent == ROOT / "remote"
