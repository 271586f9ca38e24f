"""Test harness: a real OpenSSH sshd on loopback and a jump topology in network namespaces.

Importing this package starts nothing; the fixtures in tests/conftest.py do, and only for the
tests that ask for them.
"""

from __future__ import annotations

from .netns import SUPERNET, JumpTopology, NetnsUnavailable, jump_topology, list_netns
from .sshd import (
    TEST_USER,
    BoxUser,
    ClientIdentity,
    SshdBox,
    SshdServer,
    SshdStartError,
    ensure_test_user,
    generate_key,
    known_hosts_line,
    ssh_argv,
    wipe_gpuroom_dir,
)

__all__ = [
    "SUPERNET",
    "TEST_USER",
    "BoxUser",
    "ClientIdentity",
    "JumpTopology",
    "NetnsUnavailable",
    "SshdBox",
    "SshdServer",
    "SshdStartError",
    "ensure_test_user",
    "generate_key",
    "jump_topology",
    "known_hosts_line",
    "list_netns",
    "ssh_argv",
    "wipe_gpuroom_dir",
]
