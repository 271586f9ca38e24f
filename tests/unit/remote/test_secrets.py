"""remote/secrets.py: where a credential may be written, and what a view shows of an env."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from gpuroom.remote import secrets

MOUNTINFO = """\
22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw
40 22 0:50 / {shared} rw,relatime - nfs4 server:/export rw
41 22 8:17 / {local} rw,relatime - xfs /dev/sdb1 rw
"""


def _mountinfo(tmp_path: Path, shared: Path, local: Path) -> str:
    p = tmp_path / "mountinfo"
    p.write_text(MOUNTINFO.format(shared=shared, local=local))
    return str(p)


@pytest.mark.attack("secrets", "a secret pushed to a dir on an NFS mount shared by instances")
def test_a_shared_file_system_is_refused(tmp_path: Path) -> None:
    shared, local = tmp_path / "shared", tmp_path / "local"
    info = _mountinfo(tmp_path, shared, local)
    with pytest.raises(secrets.SecretError, match="shared nfs4 file system"):
        secrets.check_location(str(shared / "secrets"), [], info)
    secrets.check_location(str(local / "secrets"), [], info)  # xfs on the box: fine


@pytest.mark.attack("secrets", "a secret pushed under the profile's mount that survives a destroy")
def test_a_durable_mount_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    durable = tmp_path / "volume"
    durable.mkdir()
    monkeypatch.setenv("GPUROOM_SECRETS_DIR", str(durable / "s"))
    with pytest.raises(secrets.SecretError, match="durable mount"):
        secrets.push("TOKEN", b"abc\n", not_under=[str(durable)])
    assert not (durable / "s").exists()
    monkeypatch.setenv("GPUROOM_SECRETS_DIR", str(tmp_path / "disk" / "s"))
    doc = secrets.push("TOKEN", b"abc\n", not_under=[str(durable)])
    path = Path(doc["path"])
    assert path.read_bytes() == b"abc" and "abc" not in str(doc)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_spec_and_names() -> None:
    assert secrets.parse_spec("WANDB") == ("WANDB", "WANDB")
    assert secrets.parse_spec("WANDB=WANDB_API_KEY") == ("WANDB", "WANDB_API_KEY")
    for bad in ("", "1X", "a-b", "A=B=C", "x;y", "../etc"):
        with pytest.raises(secrets.SecretError):
            secrets.parse_spec(bad)


def test_views_show_names_and_thread_caps_only() -> None:
    env = {"HF_TOKEN": "hf-1", "OMP_NUM_THREADS": "4", "X": "y"}
    assert secrets.redact_env(env) == {"HF_TOKEN": "<redacted>", "OMP_NUM_THREADS": "4",
                                       "X": "<redacted>"}
    assert secrets.redact_env(None) == {}


def test_a_job_whose_secret_is_gone_says_how_to_push_it(tmp_path: Path) -> None:
    (tmp_path / "A").write_text("va")
    job = {"secrets": [{"name": "A", "env": "A_VAR", "path": str(tmp_path / "A")},
                       {"name": "B", "env": "B", "path": str(tmp_path / "B")}]}
    env, missing = secrets.secret_env(job)
    assert env == {"A_VAR": "va"}
    assert len(missing) == 1 and "gpuroom secret push, this host's name, B" in missing[0]
