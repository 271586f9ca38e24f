"""The one way a verb reads hosts.toml: the file ``--config`` names, else the default one."""

from __future__ import annotations

import argparse
import difflib
import shlex
import sys

from gpuroom.tui import config as cfg


def host_config(config: cfg.Config, name: str) -> cfg.HostConfig:
    """The configured host ``name`` (``local`` while none is configured), or
    ``unknown_host``."""
    for host in config.effective_hosts():
        if host.name == name:
            return host
    raise unknown_host(config, name)


def load_config(args: argparse.Namespace, *, creating: bool = False) -> cfg.Config:
    """Read the config; its warnings (a file others can read) go to stderr once."""
    config = cfg.load_named(getattr(args, "config", None), creating=creating)
    for warning in config.warnings:
        print(f"gpuroom: warning: {warning}", file=sys.stderr)
    return config


def unknown_host(config: cfg.Config, name: str, *, adding: bool = True) -> cfg.ConfigError:
    """A host name hosts.toml does not have: most often a typo of one it has, said as such
    ("did you mean nubox"), since `hosts add nubx` would only add the typo as a host.
    ``adding``: a new host is a fix (every verb but a removal's). ``local`` is shown only
    while no host is configured; `hosts add local` would make an ssh host of that name, so
    its fix is the hosts.toml table that brings the local machine back."""
    names = [h.name for h in config.effective_hosts()]
    have = f"(have: {', '.join(names)})"
    if name == cfg.LOCAL:
        return cfg.ConfigError(f"no host {name!r} in {config.path} {have}",
                               f"add [hosts.local] with local = true to {config.path} (the "
                               "local machine is shown by itself only while no host is "
                               "configured)")
    near = difflib.get_close_matches(name, names, n=1)
    if near:
        return cfg.ConfigError(f"no host {name!r} in {config.path}; did you mean {near[0]}? "
                               f"{have}", f"type {near[0]} instead of {name}")
    return cfg.ConfigError(f"no host {name!r} in {config.path} {have}",
                           f"gpuroom hosts add {shlex.quote(name)}" if adding
                           else "gpuroom hosts list")
