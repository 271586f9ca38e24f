"""Shared fixtures. Heavy ones (sshd, namespaces) start only when a test asks for them.

sshd_box        function: the loopback box (tests/harness/sshd.py SshdBox), reset for each test:
                thawed, restarted if a test killed it, ssh_config back to `box` only, ~/.gpuroom
                gone, SSH_AUTH_SOCK unset.
sshd_session    session: the same SshdBox without the per-test reset (started once).
jump_topology   function: root -> jump -> box in network namespaces (harness/netns.py
                JumpTopology), reset like sshd_box; built once per session.
ssh_identity    session: the test user gpuroomtest and the client key every harness sshd accepts.
fixtures        session: the repository's real captures (tests/fixtures, tests/paths.py FIXTURES).

Tests mirror the code: unit/{tui,remote,profiles} (pure, no daemons), room/ (Pilot and
snapshot tests of the app), system/ (the real sshd, tmux, rsync, Slurm and namespaces).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The harness is imported as `harness` (tests/ has no __init__.py); keep that working under
# --import-mode=importlib too, which does not put tests/ on sys.path.
if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))

from harness import netns as netns_harness
from harness import sshd as sshd_harness
from harness.netns import JumpTopology
from harness.sshd import ClientIdentity, SshdBox
from paths import FIXTURES

# @pytest.mark.attack's tally and docs/RELIABILITY.md (`make reliability`).
pytest_plugins = ("harness.attacks",)

# The fuzz tests (tests/unit/tui/test_*_fuzz.py) draw the same examples on every run and
# machine, and no test is failed for being slow on a loaded box: CI stays reproducible.
# HYPOTHESIS_PROFILE=gpuroom-explore draws fresh examples (with GPUROOM_FUZZ_SCALE=20: many).
_FUZZ_CHECKS = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("gpuroom", derandomize=True, deadline=None, print_blob=True,
                          suppress_health_check=_FUZZ_CHECKS)
settings.register_profile("gpuroom-explore", deadline=None, print_blob=True,
                          suppress_health_check=_FUZZ_CHECKS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "gpuroom"))


@pytest.fixture(scope="session")
def fixtures() -> Path:
    """The repository's copy of the real command captures (tests/fixtures)."""
    assert FIXTURES.is_dir(), f"no fixtures at {FIXTURES}: the repository carries them"
    return FIXTURES


@pytest.fixture(scope="session")
def ssh_identity() -> Iterator[ClientIdentity]:
    """The unprivileged test user and a client key in a temp dir (skips where it cannot run)."""
    reason = sshd_harness.missing_requirements()
    if reason is not None:
        pytest.skip(reason)
    user = sshd_harness.ensure_test_user()
    sshd_harness.wipe_gpuroom_dir(user)
    identity = ClientIdentity.create(user)
    try:
        yield identity
    finally:
        identity.remove()


@pytest.fixture(scope="session")
def sshd_session(ssh_identity: ClientIdentity) -> Iterator[SshdBox]:
    """One real sshd on 127.0.0.1 for the whole session; killed with its sessions at the end."""
    box = SshdBox.create(ssh_identity)
    try:
        box.start()
        yield box
    finally:
        box.close()


@pytest.fixture
def sshd_box(sshd_session: SshdBox, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshdBox]:
    """The session's box, reset to a clean, answering state for this test."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    sshd_session.reset()
    yield sshd_session
    if sshd_session.frozen:  # never leave the next test (or teardown) a stopped tree
        sshd_session.thaw()


@pytest.fixture(scope="session")
def jump_topology_session(ssh_identity: ClientIdentity) -> Iterator[JumpTopology]:
    """Namespaces, veths, the safety route and two sshds, built once; teardown verifies."""
    with netns_harness.built_or_skip(netns_harness.jump_topology, ssh_identity) as topo:
        yield topo


@pytest.fixture
def jump_topology(
    jump_topology_session: JumpTopology, monkeypatch: pytest.MonkeyPatch
) -> Iterator[JumpTopology]:
    """The session's jump topology, reset for this test (see JumpTopology.reset)."""
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    jump_topology_session.reset()
    yield jump_topology_session
    for server in (jump_topology_session.jump_sshd, jump_topology_session.box_sshd):
        if server is not None and server.frozen:
            server.thaw()
