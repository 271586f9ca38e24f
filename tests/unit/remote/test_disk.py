"""Disk facts: parse_df on every real df capture, the ``du`` walk on real trees (checked against
GNU du), and the probe's statvfs numbers against this machine's real df (U7, principle 5).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from paths import FIXTURES

from gpuroom.remote import diskuse, hostinfo
from gpuroom.remote.diskuse import disk_usage, parse_df, parse_df_number

K, M, G, T = 1024, 1024**2, 1024**3, 1024**4


def capture(name: str) -> str:
    """The verbatim output below a fixture's '---' header line."""
    return (FIXTURES / "df" / name).read_text(encoding="utf-8").split("\n---\n", 1)[1]


# (filesystem, mount, total, used, free, use%) per row; -h values are df's rounded-up text.
DF_EXPECTED: dict[str, list[tuple[str, str, int | None, int | None, int | None, int | None]]] = {
    "duf-263-df-h-nfs-single.txt": [
        ("hostname:/ppl", "/storage01", 28 * T, 75 * G, 28 * T, 1),
    ],
    "friendlywrt-12-df-hi-overlay-after-fix.txt": [
        ("tmpfs", "/dev", 960 * K, 194, 959 * K, 1),
        ("tmpfs", "/run", 960 * K, 309, 959 * K, 1),
        ("overlay", "/", round(1.4 * M), 190, round(1.4 * M), 1),
        ("tmpfs", "/tmp", 960 * K, round(1.6 * K), 958 * K, 1),
        ("cgroup", "/sys/fs/cgroup", 960 * K, 13, 960 * K, 1),
    ],
    "ipfs-3444-df-hi-ext3-100pct.txt": [
        ("/dev/vda1", "/", 640 * K, 640 * K, 0, 100),
        ("udev", "/dev", 123 * K, 285, 123 * K, 1),
        ("tmpfs", "/run", 126 * K, 335, 125 * K, 1),
        ("tmpfs", "/dev/shm", 126 * K, 1, 126 * K, 1),
        ("tmpfs", "/run/lock", 126 * K, 3, 126 * K, 1),
        ("tmpfs", "/sys/fs/cgroup", 126 * K, 13, 126 * K, 1),
        ("tmpfs", "/run/user/1001", 126 * K, 4, 126 * K, 1),
    ],
    "longhorn-4508-df-i-in-pod-overlay-nfs-100pct.txt": [
        ("overlay", "/", 3268608, 1108536, 2160072, 34),
        ("tmpfs", "/dev", 994489, 17, 994472, 1),
        ("/dev/sda1", "/etc/hosts", 3268608, 1108536, 2160072, 34),
        ("shm", "/dev/shm", 994489, 1, 994488, 1),
        ("10.43.154.39:/pvc-c61f583c-2fc3-48ac-a335-016f3e061322", "/opt/odoo/web",
         131072, 131072, 0, 100),
        ("tmpfs", "/run/secrets/kubernetes.io/serviceaccount", 994489, 9, 994480, 1),
        ("tmpfs", "/proc/acpi", 994489, 1, 994488, 1),
        ("tmpfs", "/sys/firmware", 994489, 1, 994488, 1),
    ],
    "moby-37077-df-i-root-100pct-efi-dash.txt": [
        ("udev", "/dev", 4098065, 504, 4097561, 1),
        ("tmpfs", "/run", 4103142, 697, 4102445, 1),
        ("/dev/mapper/ccv360--yoda2--vg-root", "/", 30736384, 30484641, 251743, 100),
        ("tmpfs", "/dev/shm", 4103142, 1, 4103141, 1),
        ("tmpfs", "/run/lock", 4103142, 3, 4103139, 1),
        ("tmpfs", "/sys/fs/cgroup", 4103142, 16, 4103126, 1),
        ("/dev/sda2", "/boot", 124928, 309, 124619, 1),
        ("/dev/sda1", "/boot/efi", 0, 0, 0, None),  # vfat: no inodes, IUse% "-"
        ("tmpfs", "/run/user/1001", 4103142, 4, 4103138, 1),
    ],
    "photon-619-df-i-after.txt": [
        ("/dev/root", "/", 524288, 228857, 295431, 44),
        ("devtmpfs", "/dev", 256244, 286, 255958, 1),
        ("tmpfs", "/dev/shm", 256637, 1, 256636, 1),
        ("tmpfs", "/run", 256637, 359, 256278, 1),
        ("tmpfs", "/sys/fs/cgroup", 256637, 16, 256621, 1),
        ("tmpfs", "/tmp", 256637, 11, 256626, 1),
        ("tmpfs", "/run/user/0", 256637, 4, 256633, 1),
    ],
}


def rows(name: str) -> list[dict[str, Any]]:
    return parse_df(capture(name))


def test_every_df_capture_has_expectations() -> None:
    assert sorted(p.name for p in (FIXTURES / "df").iterdir()) == sorted(DF_EXPECTED)


@pytest.mark.parametrize("name", sorted(DF_EXPECTED))
def test_parse_df_capture(name: str) -> None:
    parsed = rows(name)
    assert [(r["filesystem"], r["mount"], r["total"], r["used"], r["free"], r["use_pct"])
            for r in parsed] == DF_EXPECTED[name]
    header = capture(name).splitlines()[0].split()
    assert {r["unit"] for r in parsed} == {"inodes" if header[1] == "Inodes" else "bytes"}
    # The printed text survives next to the number, byte for byte.
    body_rows = capture(name).splitlines()[1:]
    for row, line in zip(parsed, body_rows, strict=True):
        assert line.split()[1:4] == [row["total_text"], row["used_text"], row["free_text"]]


@pytest.mark.parametrize("name", [n for n in sorted(DF_EXPECTED) if "-df-i-" in n])
def test_exact_inode_rows_add_up(name: str) -> None:
    for r in rows(name):
        assert r["used"] + r["free"] == r["total"]
        if r["total"]:
            # df rounds IUse% up.
            assert r["use_pct"] == -(-100 * r["used"] // r["total"])


def test_parse_df_wrapped_device_and_dash_cells() -> None:
    # Pre-8.11 coreutils wraps a long device name onto its own line; some filesystems print "-".
    text = ("Filesystem           1K-blocks      Used Available Use% Mounted on\n"
            "/dev/mapper/vg-very--long--logical--volume--name\n"
            "                       1000000    250000    750000  25% /data\n"
            "proc                        -         -         -    - /proc\n")
    assert [(r["filesystem"], r["mount"], r["total"], r["used"], r["free"], r["use_pct"])
            for r in parse_df(text)] == [
        ("/dev/mapper/vg-very--long--logical--volume--name", "/data",
         1000000 * K, 250000 * K, 750000 * K, 25),
        ("proc", "/proc", None, None, None, None)]


def test_parse_df_number_units() -> None:
    assert parse_df_number("1.5G") == round(1.5 * G)
    assert parse_df_number("17", 1024) == 17 * K
    assert parse_df_number("-") is None
    assert diskuse._block_unit("1K-blocks") == 1024
    assert diskuse._block_unit("1-blocks") == 1  # df -B1 -P
    assert diskuse._block_unit("1kB-blocks") == 1000
    assert diskuse._block_unit("Size") is None


def test_parse_df_rejects_other_text() -> None:
    with pytest.raises(ValueError):
        parse_df("total 12\n-rw-r--r-- 1 root root 0 a\n")


# ---- statvfs (the probe) against this machine's df ----

def _df(flags: list[str], path: str) -> dict[str, Any]:
    out = subprocess.run(["df", *flags, "-P", path], capture_output=True, text=True, check=True,
                         timeout=20, env=dict(os.environ, LC_ALL="C")).stdout
    (row,) = parse_df(out)
    return row


@pytest.mark.parametrize("path", ["/", "/tmp"])
def test_probe_statvfs_matches_real_df(path: str) -> None:
    facts = hostinfo.disk_facts(path)
    inodes = _df(["-i"], path)
    blocks = _df(["-B1"], path)
    assert facts["total_inodes"] == inodes["total"]
    assert facts["total_bytes"] == blocks["total"]
    # The disk is live (five engineers share it): free moves between the two reads.
    assert abs(facts["free_inodes"] - inodes["free"]) <= 5000
    assert abs(facts["free_bytes"] - blocks["free"]) <= 256 * M


# ---- du: the walk ----

def _tree(tmp_path: Path) -> Path:
    """A cache-like tree: one big file, an inode hog, an HF-style snapshot link, a hard link,
    and a symlinked cache that lives outside the tree."""
    root = tmp_path / "root"
    (root / "evals").mkdir(parents=True)
    for i in range(300):
        (root / "evals" / f"sample_{i}.json").write_text("{}")
    (root / "big.bin").write_bytes(b"x" * 4 * M)
    blobs = root / "hub" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "abc").write_bytes(b"w" * 10000)
    (root / "hub" / "snapshots").mkdir()
    (root / "hub" / "snapshots" / "model.safetensors").symlink_to("../blobs/abc")
    os.link(blobs / "abc", blobs / "abc.hardlink")
    outside = tmp_path / "data-disk" / "hf"
    outside.mkdir(parents=True)
    (outside / "weights.bin").write_bytes(b"w" * 8 * M)
    (root / "huggingface").symlink_to(outside)
    return root


def _child(section: dict[str, Any], name: str) -> dict[str, Any]:
    (child,) = [c for c in section["by_bytes"] if c["name"] == name]
    return child


def test_du_walk_reports_hogs_and_links(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    doc = disk_usage([str(root)])
    (section,) = doc["du"]
    assert (doc["complete"], section["complete"], section["stopped_by"]) == (True, True, None)
    assert section["by_bytes"][0]["name"] == "big.bin"
    assert section["by_bytes"][0]["apparent_bytes"] == 4 * M
    assert section["by_inodes"][0]["name"] == "evals"
    assert (section["by_inodes"][0]["files"], section["by_inodes"][0]["inodes"]) == (300, 301)
    hub = _child(section, "hub")
    # dirs hub, blobs, snapshots; the blob once despite its hard link; the snapshot link itself.
    assert (hub["dirs"], hub["files"], hub["inodes"]) == (3, 2, 5)
    dir_sizes = sum(os.lstat(root / d).st_size for d in ("hub", "hub/blobs", "hub/snapshots"))
    assert hub["apparent_bytes"] == dir_sizes + 10000 + len("../blobs/abc")
    link = _child(section, "huggingface")
    assert (link["type"], link["symlink"]) == ("symlink", str(tmp_path / "data-disk" / "hf"))
    assert section["links_out"] == [{"path": str(root / "huggingface"),
                                     "target": str(tmp_path / "data-disk" / "hf"),
                                     "resolved": str(tmp_path / "data-disk" / "hf")}]
    # The 8 MiB behind the link is not counted; the in-tree snapshot link is not listed.
    assert section["apparent_bytes"] < 8 * M
    assert section["children_count"] == 4


def test_du_totals_match_gnu_du(tmp_path: Path) -> None:
    if shutil.which("du") is None:
        pytest.skip("no du binary")
    root = _tree(tmp_path)
    (section,) = disk_usage([str(root)])["du"]
    env = dict(os.environ, LC_ALL="C")
    du_bytes = subprocess.run(["du", "-s", "-B1", str(root)], capture_output=True, text=True,
                              check=True, timeout=20, env=env).stdout.split()[0]
    du_inodes = subprocess.run(["du", "-s", "--inodes", str(root)], capture_output=True,
                               text=True, check=True, timeout=20, env=env).stdout.split()[0]
    assert section["bytes"] == int(du_bytes)
    assert section["inodes"] == int(du_inodes)


def test_du_on_a_symlinked_cache_walks_where_it_lives(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (section,) = disk_usage([str(root / "huggingface")])["du"]
    assert section["symlink"] == str(tmp_path / "data-disk" / "hf")
    assert section["real_path"] == str(tmp_path / "data-disk" / "hf")
    assert (section["by_bytes"][0]["name"], section["by_bytes"][0]["apparent_bytes"]) == (
        "weights.bin", 8 * M)


def test_du_stops_at_the_entry_bound(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    doc = disk_usage([str(root), str(tmp_path / "data-disk")], max_entries=50)
    first, second = doc["du"]
    assert (doc["complete"], first["complete"], first["stopped_by"]) == (False, False, "entries")
    assert second == {"path": str(tmp_path / "data-disk"), "skipped": True, "complete": False}
    assert doc["entries"] == 51


def test_du_stops_at_the_deadline(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (section,) = disk_usage([str(root)], deadline_s=0.0)["du"]
    assert (section["complete"], section["stopped_by"]) == (False, "deadline")


def test_du_missing_path_is_complete_and_empty(tmp_path: Path) -> None:
    (section,) = disk_usage([str(tmp_path / "absent")])["du"]
    assert (section["exists"], section["complete"]) == (False, True)
    assert section["error"].startswith("FileNotFoundError")


def test_du_unreadable_directory_makes_it_incomplete(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads a mode-000 directory")
    root = _tree(tmp_path)
    (root / "evals").chmod(0)
    try:
        (section,) = disk_usage([str(root)])["du"]
    finally:
        (root / "evals").chmod(0o755)
    assert (section["unreadable"], section["complete"]) == (1, False)


def test_du_default_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    root = _tree(tmp_path)
    home = tmp_path / "home"
    (home / ".cache").mkdir(parents=True)
    (home / ".cache" / "huggingface").symlink_to(root / "huggingface")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(root / "evals")
    assert diskuse.main([]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [s["path"] for s in doc["du"]] == [
        "~/.cache/huggingface", "~/.cache/torch", "~/.cache/pip", str(root / "evals")]
    hf, torch, pip, cwd = doc["du"]
    assert (hf["exists"], hf["symlink"]) == (True, str(root / "huggingface"))
    assert hf["real_path"] == str(tmp_path / "data-disk" / "hf")
    assert (torch["exists"], pip["exists"]) == (False, False)
    assert (cwd["files"], doc["complete"]) == (300, True)


def test_du_subcommand_through_the_helper_cli(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    out = subprocess.run([sys.executable, "-m", "gpuroom.remote", "du", "--top", "2",
                          str(root)], capture_output=True, text=True, check=True, timeout=60)
    doc = json.loads(out.stdout)
    assert [c["name"] for c in doc["du"][0]["by_bytes"]] == ["big.bin", "evals"]
    assert doc["complete"] is True
