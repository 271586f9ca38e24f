"""Platform profiles: one validated TOML per platform (generic-ssh, slurm, kubernetes, colab,
kaggle, runpod, vastai, lambda, paperspace, autodl).

``load_profile(name)`` reads ``user_config_dir("gpuroom")/profiles/NAME.toml`` when the user has
one (it overrides the packaged profile of the same name), else the packaged NAME.toml. Facts
gpuroom does not know are the string "unknown"; every problem in a file is a ProfileError naming the
file, the dotted field and the fix.
"""

from __future__ import annotations

from .loader import (
    PACKAGED_DIR,
    DangerClock,
    Mount,
    Profile,
    ProfileError,
    Surface,
    UnknownProfileError,
    list_profiles,
    load_profile,
    load_profile_file,
    parse_profile,
    profile_path,
    user_profile_dir,
)
from .render import format_profile, format_profile_list, format_survival_matrix, profile_to_dict

__all__ = [
    "PACKAGED_DIR",
    "DangerClock",
    "Mount",
    "Profile",
    "ProfileError",
    "Surface",
    "UnknownProfileError",
    "format_profile",
    "format_profile_list",
    "format_survival_matrix",
    "list_profiles",
    "load_profile",
    "load_profile_file",
    "parse_profile",
    "profile_path",
    "profile_to_dict",
    "user_profile_dir",
]
