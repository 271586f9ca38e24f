"""Pull over a real OpenSSH sshd: resumable, hash-verified, load-tested, path-safe."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import logging
import os
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest

from gpuroom.tui.config import HostConfig
from gpuroom.tui.localpath import safe_local_path
from gpuroom.tui.transport import openssh_sftp
from gpuroom.tui.transport import pull as transfer
from gpuroom.tui.transport.link import HostLink, LinkError
from gpuroom.tui.transport.pull import Progress, PullResult, load_records, pull

pytestmark = pytest.mark.sshd
needs_rsync = pytest.mark.skipif(shutil.which("rsync") is None, reason="rsync not installed")
needs_ssh = pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
METHODS = ["sftp", pytest.param("openssh", marks=needs_ssh),
           pytest.param("rsync", marks=needs_rsync)]

OLD_NS = 1_600_000_000 * 10**9
WEIRD = "run 'α' \"β\" ünï.bin"


def own(box: Any, root: Path) -> None:
    """Files made by root in the box's home must belong to the box's user."""
    uid, gid = box.identity.user.uid, box.identity.user.gid
    for dirpath, dirs, names in os.walk(root):
        for n in [dirpath, *(os.path.join(dirpath, x) for x in dirs + names)]:
            os.lchown(n, uid, gid)
    os.lchown(root, uid, gid)


def box_dir(box: Any, name: str) -> Path:
    d = box.home / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir()
    return d


def link_for(box: Any) -> HostLink:
    return HostLink(HostConfig(name="box", ssh=box.alias), ssh_config=box.ssh_config)


async def pull_from(box: Any, *args: Any, **kwargs: Any) -> PullResult:
    """One pull() over a fresh link to the box, closed whatever happens."""
    link = link_for(box)
    try:
        return await pull(link, *args, **kwargs)
    finally:
        await link.close()


async def test_pull_torch_checkpoint_dir(sshd_box: Any, tmp_path: Path) -> None:
    import torch

    src = box_dir(sshd_box, "ckpt_multi")
    torch.save({"w": torch.arange(1000, dtype=torch.float32)}, src / "model.pt")
    torch.save({"step": 3, "m": torch.ones(7)}, src / "optim.pth")
    (src / "sub").mkdir()
    torch.save({"x": torch.zeros(3, 3)}, src / "sub" / "last.ckpt")
    (src / "sub" / WEIRD).write_bytes(os.urandom(5000))
    own(sshd_box, src)
    state = tmp_path / "pulls.json"
    seen: list[Progress] = []
    result = await pull_from(sshd_box, str(src), tmp_path / "out", job="7", state_path=state,
                             on_progress=seen.append)
    assert result.ok, [(f.path, f.detail) for f in result.files]
    by_path = {f.path: f for f in result.files}
    assert {p: f.verified_by for p, f in by_path.items()} == {
        "model.pt": "load", "optim.pth": "load", "sub/last.ckpt": "load",
        f"sub/{WEIRD}": "hash"}
    for rel in by_path:
        assert (tmp_path / "out" / rel).read_bytes() == (src / rel).read_bytes()
    assert not list((tmp_path / "out").rglob("*.part"))
    assert seen[-1].done == seen[-1].total == sum(f.size for f in result.files)
    [record] = load_records(state)
    assert record["host"] == "box" and record["job"] == "7" and record["verified_by"] == "load"
    assert {f["path"] for f in record["files"]} == set(by_path)


@pytest.mark.attack("faults", "interrupted pull resends only missing bytes")
@pytest.mark.parametrize("method", METHODS)
async def test_interrupted_pull_resends_only_missing_bytes(
        sshd_box: Any, tmp_path: Path, method: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # rsync moves 48 MiB on loopback faster than its progress is sampled: slow it to ~2 s.
    monkeypatch.setattr(transfer, "RSYNC_OPTIONS", ("--bwlimit=20m",))
    src = box_dir(sshd_box, "ckpt_big")
    size = 48 << 20
    (src / "big.bin").write_bytes(os.urandom(size))
    own(sshd_box, src)
    out = tmp_path / "out"
    part = out / "big.bin.part"

    # 1. The pull's task is cancelled mid-file (the user pressed cancel, the app quit).
    def cancel_at_third(p: Progress) -> None:
        if p.done > size // 3:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await pull_from(sshd_box, str(src), out, on_progress=cancel_at_third,
                        state_path=tmp_path / "s", method=method)
    first_part = part.stat().st_size
    assert 0 < first_part < size

    # 2. The box's sshd dies with every session mid-file (a crashed or rebooting box).
    def kill_box(p: Progress) -> None:
        if p.done > first_part + size // 3 and sshd_box.alive:
            sshd_box.kill_all()

    with pytest.raises(LinkError):
        await pull_from(sshd_box, str(src), out, on_progress=kill_box, state_path=tmp_path / "s",
                        method=method)
    second_part = part.stat().st_size
    assert first_part < second_part < size
    sshd_box.start()

    # 3. Resume: only the bytes missing from the .part cross the wire.
    result = await pull_from(sshd_box, str(src), out, state_path=tmp_path / "s", method=method)
    assert result.ok and result.files[0].via == method
    missing = size - second_part
    if method in ("sftp", "openssh"):
        assert result.bytes_transferred == missing  # bytes answered by SFTP reads
    else:
        # rsync's own count of bytes received: the missing ones plus its protocol (a few KB).
        assert missing <= result.bytes_transferred < missing + size // 100
    assert (out / "big.bin").read_bytes() == (src / "big.bin").read_bytes()
    assert not part.exists()


@pytest.mark.attack("faults", "box dying mid pull leaves no orphaned errors")
@pytest.mark.parametrize("method", ["sftp", pytest.param("openssh", marks=needs_ssh)])
async def test_box_dying_mid_pull_leaves_no_orphaned_errors(
        sshd_box: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, method: str) -> None:
    # Reads still in flight when the box dies must all be awaited by someone: asyncio prints
    # a traceback for each one that is not, into the terminal of a CLI pull.
    src = box_dir(sshd_box, "ckpt_orphans")
    size = 32 << 20
    (src / "big.bin").write_bytes(os.urandom(size))
    own(sshd_box, src)

    def kill_box(p: Progress) -> None:
        if p.done > size // 3 and sshd_box.alive:
            sshd_box.kill_all()

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        try:
            with pytest.raises(LinkError):
                await pull_from(sshd_box, str(src), tmp_path / "out", on_progress=kill_box,
                                state_path=tmp_path / "s", method=method)
        finally:
            sshd_box.start()
        for _ in range(3):  # a lost task is reported when it is collected
            await asyncio.sleep(0.1)
            gc.collect()
    assert [r.getMessage() for r in caplog.records] == []
    assert 0 < (tmp_path / "out" / "big.bin.part").stat().st_size < size


@pytest.mark.attack("faults", "byte flipped after manifest fails and leaves nothing")
async def test_byte_flipped_after_manifest_fails_and_leaves_nothing(
        sshd_box: Any, tmp_path: Path) -> None:
    src = box_dir(sshd_box, "ckpt_flip")
    data = os.urandom(100_000)
    victim = src / "model.bin"
    victim.write_bytes(data)
    os.utime(victim, ns=(OLD_NS, OLD_NS))
    own(sshd_box, src)
    flipped = False

    def flip(p: Progress) -> None:
        # After the manifest, before the bytes: one byte rots in place, mtime unchanged, so
        # the box's cached digest (and any re-check) still names the original content.
        nonlocal flipped
        if not flipped:
            flipped = True
            with open(victim, "r+b") as f:
                f.seek(5000)
                f.write(bytes([data[5000] ^ 0xFF]))
            os.utime(victim, ns=(OLD_NS, OLD_NS))

    state = tmp_path / "pulls.json"
    result = await pull_from(sshd_box, str(src), tmp_path / "out", on_progress=flip,
                             state_path=state)
    assert flipped and not result.ok
    [fr] = result.files
    assert fr.status == "failed" and "mismatch" in fr.detail
    assert not (tmp_path / "out" / "model.bin").exists()
    assert not (tmp_path / "out" / "model.bin.part").exists()
    assert load_records(state) == []


@pytest.mark.attack("faults", "file rewritten during pull is refetched whole")
@pytest.mark.parametrize("deferred", [False, True], ids=["hashed-first", "hashed-in-flight"])
async def test_file_rewritten_during_pull_is_refetched_whole(
        sshd_box: Any, tmp_path: Path, deferred: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    if deferred:  # the box lists the file unhashed and hashes it while it travels
        monkeypatch.setattr(transfer, "DEFER_HASH_BYTES", 100_000)
    src = box_dir(sshd_box, "ckpt_rewrite")
    victim = src / "model.bin"
    victim.write_bytes(b"a" * 300_000)
    os.utime(victim, ns=(OLD_NS, OLD_NS))
    own(sshd_box, src)
    # Another size too: when the box hashes it in flight, that hash is already of the new
    # file, and only the size tells the digest from the bytes that were listed.
    new = os.urandom(200_000)
    done = False
    seen: list[Progress] = []

    def rewrite(p: Progress) -> None:
        nonlocal done
        seen.append(p)
        if not done:
            done = True
            victim.write_bytes(new)  # a new mtime: the box's manifest sees a new file

    result = await pull_from(sshd_box, str(src), tmp_path / "out", on_progress=rewrite,
                             state_path=tmp_path / "s.json")
    [fr] = result.files
    assert result.ok and "re-fetched" in fr.detail, fr.detail
    assert (tmp_path / "out" / "model.bin").read_bytes() == new
    assert fr.size == len(new) and fr.sha256 == hashlib.sha256(new).hexdigest()
    assert (seen[-1].done, seen[-1].total) == (len(new), len(new))  # progress ends at 100 %


@pytest.mark.attack("faults", "file deleted on the box during pull fails alone")
@pytest.mark.parametrize("method", METHODS)
async def test_file_deleted_on_the_box_during_pull_fails_alone(
        sshd_box: Any, tmp_path: Path, method: str) -> None:
    src = box_dir(sshd_box, "ckpt_vanish")
    (src / "a.bin").write_bytes(os.urandom(50_000))
    (src / "b.bin").write_bytes(b"kept")
    own(sshd_box, src)

    def delete_a(p: Progress) -> None:
        if p.path == "a.bin":
            (src / "a.bin").unlink(missing_ok=True)  # a cleanup job on the box, say

    result = await pull_from(sshd_box, str(src), tmp_path / "out", on_progress=delete_a,
                             state_path=tmp_path / "s.json", method=method)
    status = {f.path: (f.status, f.detail) for f in result.files}
    assert status == {"a.bin": ("failed", "gone on the box since it was listed: nothing kept"),
                      "b.bin": ("verified", "")}
    assert not result.ok and (tmp_path / "out" / "b.bin").read_bytes() == b"kept"
    assert not list((tmp_path / "out").glob("a.bin*"))


async def test_big_files_are_hashed_on_the_box_while_they_travel(
        sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "DEFER_HASH_BYTES", 1 << 20)
    src = box_dir(sshd_box, "ckpt_defer")
    blobs = {"a.bin": os.urandom(3 << 20), "b.bin": os.urandom(2 << 20), "c.txt": b"small"}
    for name, data in blobs.items():
        (src / name).write_bytes(data)
        os.utime(src / name, ns=(OLD_NS, OLD_NS))
    own(sshd_box, src)
    done = 0
    calls: list[tuple[list[str] | None, int | None, int]] = []
    answers: list[dict[str, Any]] = []
    real_take = transfer.take_manifest

    async def spy(link: HostLink, remote_dir: str, only: list[str] | None = None,
                  **kw: Any) -> dict[str, Any]:
        calls.append((only, kw.get("defer_above"), done))
        doc = await real_take(link, remote_dir, only, **kw)
        answers.append(doc)
        return doc

    def progress(p: Progress) -> None:
        nonlocal done
        done = p.done

    monkeypatch.setattr(transfer, "take_manifest", spy)
    state = tmp_path / "pulls.json"
    result = await pull_from(sshd_box, str(src), tmp_path / "out", state_path=state,
                             on_progress=progress, method="sftp")
    assert result.ok, [(f.path, f.detail) for f in result.files]
    # One listing that leaves the big files unhashed, then one hash each, in pull order.
    assert [(only, defer) for only, defer, _ in calls] == [
        (None, 1 << 20), (["a.bin"], None), (["b.bin"], None)]
    assert {f["path"]: f["sha256"] for f in answers[0]["files"]} == {
        "a.bin": None, "b.bin": None, "c.txt": hashlib.sha256(b"small").hexdigest()}
    # The box was asked for a.bin's digest before a.bin had arrived.
    assert calls[1][2] < len(blobs["a.bin"])
    want = {name: hashlib.sha256(data).hexdigest() for name, data in blobs.items()}
    assert {f.path: f.sha256 for f in result.files} == want
    assert {f.path: f.detail for f in result.files} == dict.fromkeys(blobs, "")
    for name, data in blobs.items():
        assert (tmp_path / "out" / name).read_bytes() == data
    [record] = load_records(state)
    assert {f["path"]: f["sha256"] for f in record["files"]} == want
    # The in-flight digests landed in the box's cache: the next listing defers nothing.
    calls.clear()
    again = await pull_from(sshd_box, str(src), tmp_path / "out", state_path=state, method="sftp")
    assert again.ok and [c[0] for c in calls] == [None]
    assert {f.path: f.detail for f in again.files} == dict.fromkeys(blobs, "already here")


@pytest.mark.attack("faults", "truncated checkpoint passes no load test")
async def test_truncated_checkpoint_passes_no_load_test(sshd_box: Any, tmp_path: Path) -> None:
    import torch

    src = box_dir(sshd_box, "ckpt_trunc")
    torch.save({"w": torch.randn(4000)}, src / "model.pt")
    with open(src / "model.pt", "r+b") as f:
        f.truncate(f.seek(0, 2) // 2)  # a save cut off by a full disk or a killed job
    own(sshd_box, src)
    state = tmp_path / "pulls.json"
    result = await pull_from(sshd_box, str(src), tmp_path / "out", state_path=state)
    [fr] = result.files
    # Home (the box has the very same bytes) but never taken for a loadable checkpoint: the
    # report says the load check failed and that pulling again cannot help.
    assert fr.status == "verified" and fr.verified_by == "hash"
    assert result.load_failed == [fr]
    assert fr.detail.startswith("load check failed: ") and "CORRUPT or truncated" in fr.detail
    assert "pulling again cannot help" in fr.detail
    [record] = load_records(state)
    assert record["verified_by"] == "hash" and record["files"][0]["load_error"] == fr.detail


@pytest.mark.attack("injection", "symlink on box is refused")
async def test_symlink_on_box_is_refused(sshd_box: Any, tmp_path: Path) -> None:
    src = box_dir(sshd_box, "ckpt_link")
    (src / "ok.bin").write_bytes(b"fine")
    (src / "secrets").symlink_to("/etc/shadow")
    own(sshd_box, src)
    result = await pull_from(sshd_box, str(src), tmp_path / "out", state_path=tmp_path / "s.json")
    status = {f.path: f.status for f in result.files}
    assert status == {"ok.bin": "verified", "secrets": "refused"} and not result.ok
    assert not (tmp_path / "out" / "secrets").exists()
    assert json.dumps([f.detail for f in result.files if f.status == "refused"]).count(
        "symlink") == 1


@pytest.mark.attack("injection", "paths outside local dir are refused")
def test_paths_outside_local_dir_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "escape").symlink_to(tmp_path)  # a local symlinked subdir must not be a way out
    for rel in ("../x", "a/../../x", "/etc/passwd", "", "a//b", "escape/x", "..", "."):
        assert safe_local_path(out, rel) is None, rel
    assert safe_local_path(out, "sub/ok.pt") == out.resolve() / "sub" / "ok.pt"


@pytest.mark.attack("faults", "stale part of another version is refetched")
@pytest.mark.parametrize("method", METHODS)
async def test_stale_part_of_another_version_is_refetched(
        sshd_box: Any, tmp_path: Path, method: str) -> None:
    src = box_dir(sshd_box, "ckpt_stale")
    data = os.urandom(300_000)
    (src / "model.bin").write_bytes(data)
    own(sshd_box, src)
    out = tmp_path / "out"
    out.mkdir()
    # A .part left by a pull of an older model.bin: a resume appends to it, the hash of the
    # whole says no, and the file is fetched again from zero.
    (out / "model.bin.part").write_bytes(os.urandom(100_000))
    result = await pull_from(sshd_box, str(src), out, state_path=tmp_path / "s.json", method=method)
    [fr] = result.files
    assert result.ok and fr.via == method and "re-fetched" in fr.detail
    assert (out / "model.bin").read_bytes() == data
    assert not (out / "model.bin.part").exists()


@needs_ssh
@needs_rsync
async def test_auto_sends_big_files_through_ssh_sftp_and_falls_back_when_it_cannot_start(
        sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = box_dir(sshd_box, "ckpt_auto")
    big, small = os.urandom(2 << 20), os.urandom(1000)
    (src / WEIRD).write_bytes(big)  # quotes and spaces: neither path hands it to a shell
    (src / "small.bin").write_bytes(small)
    own(sshd_box, src)
    monkeypatch.setattr(transfer, "BULK_MIN_BYTES", 1 << 20)
    # The user's ssh_config picks chacha20 for this alias: asyncssh's SFTP is slow under it.
    sshd_box.write_ssh_config({"box-chacha": {"Ciphers": "chacha20-poly1305@openssh.com"}})

    async def pulled(name: str, alias: str) -> tuple[dict[str, str], str]:
        link = HostLink(HostConfig(name="box", ssh=alias), ssh_config=sshd_box.ssh_config)
        try:
            result = await pull(link, str(src), tmp_path / name, state_path=tmp_path / "s")
        finally:
            await link.close()
        assert result.ok
        assert (tmp_path / name / WEIRD).read_bytes() == big
        assert (tmp_path / name / "small.bin").read_bytes() == small
        return {f.path: f.via for f in result.files}, result.note

    # Big files through ssh's own SFTP whatever the cipher; small ones on the link.
    for alias in (sshd_box.alias, "box-chacha"):
        via, note = await pulled(f"ok-{alias}", alias)
        assert via == {WEIRD: "openssh", "small.bin": "sftp"} and "ssh's sftp" not in note

    # ssh cannot open its session (here: a cipher spec this ssh refuses, a real ssh error).
    class BrokenSsh(openssh_sftp.OpenSshSftp):
        def __init__(self, host: str, argv: list[str], alias: str) -> None:
            super().__init__(host, [*argv, "-o", "Ciphers=no-such-cipher"], alias)

    monkeypatch.setattr(transfer, "OpenSshSftp", BrokenSsh)
    via, note = await pulled("gcm", sshd_box.alias)
    assert via == {WEIRD: "sftp", "small.bin": "sftp"}  # AES-GCM link: SFTP keeps up
    assert "ssh's sftp session did not start" in note and "no-such-cipher" in note, note
    via, _ = await pulled("chacha", "box-chacha")
    assert via == {WEIRD: "rsync", "small.bin": "sftp"}  # chacha on the link: rsync instead
    # ... and a box without rsync either (the probe finds none): everything over the link.
    monkeypatch.setattr(transfer, "RSYNC_REMOTE", "gpuroom-no-such-rsync")
    via, _ = await pulled("norsync", "box-chacha")
    assert via == {WEIRD: "sftp", "small.bin": "sftp"}


def _bulk_argv(box: Any) -> list[str]:
    return ["ssh", "-F", str(box.ssh_config), "-o", "BatchMode=yes"]


@needs_ssh
async def test_ssh_sftp_asks_again_for_what_a_short_answer_left_out(
        sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # SFTP lets a server answer a read with fewer bytes than asked. Ask the real sftp-server
    # for 1 MiB blocks (it answers at most 255 KiB) without learning its limit first.
    monkeypatch.setattr(openssh_sftp, "_LIMITS_EXT", b"gpuroom-not-an-extension@example")
    monkeypatch.setattr(openssh_sftp, "_SAFE_BLOCK", 1 << 20)
    src = box_dir(sshd_box, "ckpt_short")
    data = os.urandom((3 << 20) + 12345)
    (src / "x.bin").write_bytes(data)
    own(sshd_box, src)
    asked: list[tuple[int, int]] = []
    real_send = openssh_sftp._Pipes.send

    def spy(pipes: Any, kind: int, body: bytes) -> None:
        if kind == openssh_sftp._READ:
            asked.append(struct.unpack(">QI", body[-12:]))
        real_send(pipes, kind, body)

    monkeypatch.setattr(openssh_sftp._Pipes, "send", spy)
    session = openssh_sftp.OpenSshSftp("box", _bulk_argv(sshd_box), sshd_box.alias)
    part = tmp_path / "x.bin.part"
    part.write_bytes(data[:1000])  # a resume, from an offset inside the first block
    try:
        got = await session.fetch(str(src / "x.bin"), part, offset=1000, size=len(data),
                                  on_progress=lambda n: None)
    finally:
        await session.close()
    assert part.read_bytes() == data
    assert got == len(data) - 1000
    firsts = [off for off, length in asked if length == 1 << 20]
    assert firsts[:3] == [1000, 1000 + (1 << 20), 1000 + (2 << 20)]
    assert len(asked) > 5  # the short answers were followed by asks for their rest


@needs_ssh
async def test_file_shrinking_under_ssh_sftp_is_refetched_whole(
        sshd_box: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transfer, "BULK_MIN_BYTES", 1 << 20)
    src = box_dir(sshd_box, "ckpt_shrink")
    victim = src / "w.bin"
    victim.write_bytes(os.urandom(8 << 20))
    own(sshd_box, src)
    new = os.urandom(1 << 20)
    real_send = openssh_sftp._Pipes.send
    cut = False

    def shrink_before_the_read_at_2mib(pipes: Any, kind: int, body: bytes) -> None:
        nonlocal cut
        if kind == openssh_sftp._READ and not cut and \
                struct.unpack(">Q", body[-12:-4])[0] >= 2 << 20:
            cut = True  # the box's job rewrites it, shorter, while it travels
            victim.write_bytes(new)
        real_send(pipes, kind, body)

    monkeypatch.setattr(openssh_sftp._Pipes, "send", shrink_before_the_read_at_2mib)
    result = await pull_from(sshd_box, str(src), tmp_path / "out", state_path=tmp_path / "s")
    [fr] = result.files
    assert cut and fr.via == "openssh"
    assert result.ok and "re-fetched" in fr.detail, fr.detail
    assert (tmp_path / "out" / "w.bin").read_bytes() == new
