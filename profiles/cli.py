"""`gpuroom profiles` and `gpuroom profiles show NAME [--json]`.

tui/cli/main.py calls ``add_cli(sub)`` with its subparsers; each verb sets ``func(args) -> int``.
Exit codes follow tui/cli/main.py: 0 ok, 2 unknown profile or a profile file that does not validate.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .loader import Profile, ProfileError, UnknownProfileError, list_profiles, load_profile
from .render import format_profile, format_profile_list, profile_to_dict

EXIT_OK = 0
EXIT_USAGE = 2


def _user_dir(args: argparse.Namespace) -> Path | None:
    value = getattr(args, "profiles_dir", None)
    return Path(value).expanduser() if value else None


def cmd_profiles_list(args: argparse.Namespace) -> int:
    """Every profile; a user file that does not validate is reported and makes the exit 2."""
    user_dir = _user_dir(args)
    profiles: list[Profile] = []
    broken = False
    for name in list_profiles(user_dir):
        try:
            profiles.append(load_profile(name, user_dir))
        except ProfileError as exc:
            print(f"gpuroom: {exc}", file=sys.stderr)
            broken = True
    if getattr(args, "json", False):
        print(json.dumps([profile_to_dict(p) for p in profiles], indent=2, ensure_ascii=False))
    else:
        print(format_profile_list(profiles))
    return EXIT_USAGE if broken else EXIT_OK


def cmd_profiles_show(args: argparse.Namespace) -> int:
    try:
        profile = load_profile(args.name, _user_dir(args))
    except UnknownProfileError as exc:
        print(f"gpuroom: unknown profile {exc.name!r}; known profiles: "
              + ", ".join(exc.known), file=sys.stderr)
        return EXIT_USAGE
    except ProfileError as exc:
        print(f"gpuroom: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(profile_to_dict(profile), indent=2, ensure_ascii=False))
    else:
        print(format_profile(profile))
    return EXIT_OK


def add_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `profiles` (list) and `profiles show NAME [--json]`."""
    dir_help = "directory of user profiles (default: the gpuroom config dir's profiles/)"
    p = subparsers.add_parser("profiles", help="platform profiles: what survives, what bills")
    p.add_argument("--profiles-dir", metavar="DIR", help=dir_help)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_profiles_list)
    psub = p.add_subparsers(dest="profiles_cmd")
    # A subparser's defaults replace the parent's, so `profiles show` lands on show.
    show = psub.add_parser("show", help="one profile: facts, survival matrix, danger clocks")
    show.add_argument("name")
    show.add_argument("--json", action="store_true", help="machine-readable output")
    show.set_defaults(func=cmd_profiles_show)
    lst = psub.add_parser("list", help="every profile (the default)")
    lst.add_argument("--json", action="store_true", help="machine-readable output")
    lst.set_defaults(func=cmd_profiles_list)
