"""The one way a verb reads hosts.toml: the file ``--config`` names, else the default one."""

from __future__ import annotations

import argparse
import shlex
import sys

from gpuroom.tui import config as cfg


def no_host(config: cfg.Config, name: str) -> cfg.ConfigError:
    """The error for a host the config does not have, with the fix that adds it. ``local``
    is shown only while no host is configured; `hosts add local` would make an ssh host of
    that name, so its fix is the hosts.toml table that brings the local machine back."""
    have = ", ".join(h.name for h in config.effective_hosts())
    if name == cfg.LOCAL:
        fix = (f"add [hosts.local] with local = true to {config.path} (the local machine is "
               "shown by itself only while no host is configured)")
    else:
        fix = f"gpuroom hosts add {shlex.quote(name)}"
    return cfg.ConfigError(f"no host {name!r} in {config.path} (have: {have})", fix)


def host_config(config: cfg.Config, name: str) -> cfg.HostConfig:
    """The configured host ``name`` (``local`` while none is configured), or ``no_host``."""
    for host in config.effective_hosts():
        if host.name == name:
            return host
    raise no_host(config, name)


def load_config(args: argparse.Namespace, *, creating: bool = False) -> cfg.Config:
    """Read the config; its warnings (a file others can read) go to stderr once."""
    config = cfg.load_named(getattr(args, "config", None), creating=creating)
    for warning in config.warnings:
        print(f"gpuroom: warning: {warning}", file=sys.stderr)
    return config
