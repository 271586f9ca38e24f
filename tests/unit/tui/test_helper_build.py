"""tui/transport/helper_build.py: the zipapp carries remote/ whole, sub-packages included, and
nothing of the jump-host side."""

from __future__ import annotations

import io
import subprocess
import sys
import zipfile
from pathlib import Path

import tomllib
from paths import ROOT

from gpuroom.tui.transport.helper_build import archive_entries, build_bytes, helper_archive

REMOTE = ROOT / "remote"
# Beside remote/ the archive holds only these: the package marker, NVML's bindings, the entry.
NOT_REMOTE = {"gpuroom/__init__.py", "pynvml.py", "__main__.py"}


def _members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def test_zipapp_holds_every_remote_module_and_nothing_of_the_jump_host() -> None:
    members = _members(helper_archive().data)
    remote = {f"gpuroom/remote/{p.relative_to(REMOTE).as_posix()}": p.read_bytes()
              for p in REMOTE.rglob("*.py")}
    assert "gpuroom/remote/probe.py" in remote  # the walk found the real tree
    assert {n: b for n, b in members.items() if n not in NOT_REMOTE} == remote
    assert set(members) == set(remote) | NOT_REMOTE
    assert members["gpuroom/__init__.py"] == b""
    # The entry point starts the box side only.
    assert b"gpuroom.remote.cli" in members["__main__.py"]
    assert b"gpuroom.tui" not in members["__main__.py"]


def test_sub_packages_of_remote_are_archived_and_import_from_the_zipapp(tmp_path: Path) -> None:
    remote = tmp_path / "remote"
    (remote / "sub" / "__pycache__").mkdir(parents=True)
    (remote / "__init__.py").write_text("")
    (remote / "cli.py").write_text(
        "from .sub.leaf import VALUE\n\n\ndef main() -> int:\n    print(VALUE)\n    return 0\n")
    (remote / "sub" / "__init__.py").write_text("")
    (remote / "sub" / "leaf.py").write_text("VALUE = 'leaf of a sub-package'\n")
    (remote / "sub" / "__pycache__" / "leaf.cpython-311.pyc").write_bytes(b"not source")
    (remote / "NOTES.txt").write_text("not source")
    entries = archive_entries(remote)
    assert [n for n, _ in entries if n.startswith("gpuroom/remote/")] == [
        "gpuroom/remote/__init__.py", "gpuroom/remote/cli.py",
        "gpuroom/remote/sub/__init__.py", "gpuroom/remote/sub/leaf.py"]
    pyz = tmp_path / "helper.pyz"
    pyz.write_bytes(build_bytes(entries))
    # The zip comes first on sys.path, so gpuroom.remote here is the archived one, not the
    # checkout's (which has no sub/).
    run = subprocess.run([sys.executable, str(pyz)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert (run.returncode, run.stdout, run.stderr) == (0, "leaf of a sub-package\n", "")


def test_every_remote_folder_with_code_is_a_package_the_distribution_installs() -> None:
    """The archive is built from the installed gpuroom/remote/: a folder missing from
    [tool.setuptools] packages would be in an editable checkout's archive but not a wheel's."""
    packages = set(tomllib.loads((ROOT / "pyproject.toml").read_text())
                   ["tool"]["setuptools"]["packages"])
    folders = sorted({p.parent for p in REMOTE.rglob("*.py")})
    assert REMOTE in folders
    for folder in folders:
        assert (folder / "__init__.py").is_file(), f"{folder} holds code but no __init__.py"
        dotted = ".".join(("gpuroom", "remote", *folder.relative_to(REMOTE).parts))
        assert dotted in packages, f"{dotted} is missing from [tool.setuptools] packages"
