"""The one way a verb reads hosts.toml: the file ``--config`` names, else the default one."""

from __future__ import annotations

import argparse
import sys

from gpuroom.tui import config as cfg


def load_config(args: argparse.Namespace, *, creating: bool = False) -> cfg.Config:
    """Read the config; its warnings (a file others can read) go to stderr once."""
    config = cfg.load_named(getattr(args, "config", None), creating=creating)
    for warning in config.warnings:
        print(f"gpuroom: warning: {warning}", file=sys.stderr)
    return config
