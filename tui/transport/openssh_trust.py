"""The OpenSSH client gpuroom starts (key ``s``, big pulls, ``gpuroom push``) trusts the host
keys and offers the client keys the asyncssh link does.

Both read the same ssh_config, but they expand ``~`` differently: asyncssh (Python) from
``$HOME``, OpenSSH from the passwd entry's home. With ``HOME`` pointing elsewhere (a private
HOME, sudo, a container) the link trusted a key the ``s`` key's ssh then asked to trust again,
from another known_hosts. So the files the link reads are named to ssh explicitly: the command
line's ``-o`` wins over the config, and the same files mean the same answer. What the link
reads is asked of asyncssh in link.py (HostLink.openssh_trust); this module only words it.
"""

from __future__ import annotations

import os
import pwd
from collections.abc import Sequence
from pathlib import Path

# asyncssh's own default key files (asyncssh/public_key.py), read from $HOME/.ssh.
_DEFAULT_KEYS = ("id_ed25519_sk", "id_ecdsa_sk", "id_ed448", "id_ed25519", "id_ecdsa",
                 "id_rsa")


def _option(name: str, paths: Sequence[str]) -> list[str]:
    # ssh splits an -o value at spaces unless quoted; these are the user's own paths.
    value = " ".join(f'"{p}"' if " " in p else p for p in paths)
    return ["-o", f"{name}={value}"]


def _passwd_home() -> Path | None:
    try:
        return Path(pwd.getpwuid(os.getuid()).pw_dir)
    except KeyError:
        return None


def trust_options(known_hosts: Sequence[str] | None, identity_files: Sequence[str]) -> list[str]:
    """``-o`` options naming the link's files to OpenSSH.

    ``known_hosts``: the files the ssh_config names (asyncssh's ``known_hosts`` option: empty
    when it names none, then ``$HOME/.ssh/known_hosts``; None when it turns checking off, which
    OpenSSH reads from the same config itself). ``identity_files``: the config's IdentityFile
    lines; offered explicitly only where OpenSSH's home is not ``$HOME`` (else it finds them).
    """
    if known_hosts is None:
        return []
    files = [str(Path(f).expanduser()) for f in known_hosts] or \
        [str(Path("~/.ssh/known_hosts").expanduser())]
    # The link reads no global file unless the config names one: neither does this ssh.
    argv = [*_option("UserKnownHostsFile", files), "-o", "GlobalKnownHostsFile=/dev/null"]
    if _passwd_home() != Path.home():
        keys = [str(Path(k).expanduser()) for k in identity_files] or [
            str(p) for p in (Path.home() / ".ssh" / n for n in _DEFAULT_KEYS) if p.is_file()]
        for key in keys:
            argv += _option("IdentityFile", [key])
    return argv
