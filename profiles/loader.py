"""Load and validate platform profiles (one TOML per platform).

A profile says what a platform does to your disk, your job and your bill: the platform facts
(how the meter stops, how a job detaches, spot, inode cap, ...), the mounts to watch with what
survives a stop and a destroy, the danger clocks and the lines to tell the user on first
contact (principle 10).

Where profiles come from: the packaged ``*.toml`` next to this module, and the user's own
``platformdirs.user_config_dir("gpuroom")/profiles/NAME.toml``. A user file overrides the
packaged profile of the same NAME, so a user can correct a fact for their provider without
waiting for a release.

Every problem in a file is a ``ProfileError`` built by one function, ``_error``, whose message
names the file, the field as a dotted path (``mounts[1].survives_destroy``) and the fix.
The checks are table-driven: one table per TOML table, one checker per field.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import platformdirs

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.localfile import LocalFileError, read_regular

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 jump hosts
    import tomli as tomllib

# "unknown": gpuroom does not know it for this platform. "host-dependent": measure it on the box
# (the generic-ssh profile's wording). "n/a": the platform has no such thing (Slurm has nothing
# to destroy).
Special = Literal["unknown", "host-dependent", "n/a"]
Fact = bool | Special
# The kind of platform: an SSH box, a Slurm login node, a Kubernetes cluster, a notebook.
Kind = Literal["ssh", "slurm", "kubernetes", "notebook"]
# What keeps a job alive without the session (principle 8): tmux/nohup on a box, sbatch on
# Slurm, a Job on Kubernetes, a commit on Kaggle, a checkpoint-to-Drive loop on Colab.
DetachPrimitive = Literal["tmux", "nohup", "sbatch", "k8s-job", "kaggle-commit",
                          "drive-checkpoint", "unknown"]
Survival = bool | Literal["unknown", "n/a"]
ClockKind = Literal[
    "auto_release_after_stop",  # a stopped box is deleted after this long (AutoDL 15 days)
    "session_cap",  # the session/VM ends after this long whatever you do (Colab ~12 h)
    "idle_timeout",  # no activity for this long ends the session (Kaggle ~60 min)
    "walltime",  # the scheduler kills the job at its time limit (Slurm --time)
    "billing_while_stopped",  # a stopped box still bills (vast.ai disk, forever)
    "billing_while_running",  # nothing ever stops the meter but you (bare box, 24/7)
    "quota",  # a budget that runs out (Kaggle 30 GPU-hours/week, Slurm fairshare)
]
# seconds of a clock: a number, or "per-job" (set at submit), "none" (no timer, the meter just
# runs), "unknown" (gpuroom knows no number).
ClockSeconds = int | Literal["unknown", "per-job", "none"]
Origin = Literal["packaged", "user"]

PACKAGED_DIR = Path(__file__).resolve().parent
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_TOML_LINE_RE = re.compile(r"at line (\d+)")


class ProfileError(GpuroomError):
    """A profile gpuroom cannot use; the message names the file and the field."""

    exit_code = 2  # tui/cli/main.py and profiles/cli.py: usage or config error

    def __init__(self, path: Path | None, field: str, reason: str, fix: str) -> None:
        where = f"{path}: " if path is not None else ""
        super().__init__(f"{where}{field}: {reason}", fix)
        self.path = path
        self.field = field
        self.reason = reason


class UnknownProfileError(ProfileError):
    """No packaged or user profile has this name; ``known`` lists the names that exist."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(None, f"profile {name!r}", "no such profile",
                         "use one of: " + ", ".join(known))


def _error(path: Path, field: str, reason: str, fix: str) -> ProfileError:
    """The one place a file's problem becomes an error message."""
    return ProfileError(path, field, reason, fix)


@dataclass(frozen=True)
class Mount:
    """A path to watch and what survives the platform's stop and destroy verbs."""

    path: str  # may use ~ or $VAR, expanded on the box; "unknown" when no path is known
    role: str
    survives_stop: Survival
    survives_destroy: Survival
    note: str = ""
    source: str = ""


@dataclass(frozen=True)
class DangerClock:
    """A timer or meter that costs data or money when it fires (principle 10)."""

    kind: ClockKind
    seconds: ClockSeconds
    text: str
    approximate: bool = False  # shown as "~": the platform may move it
    source: str = ""


@dataclass(frozen=True)
class Surface:
    """What to tell the user on first contact with the platform (principle 10)."""

    dangers: tuple[str, ...] = ()
    conveniences: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Profile:
    """One platform's facts, validated. Values gpuroom does not know are "unknown"."""

    platform: str
    kind: Kind
    meter_stop_verb: str
    meter_stop_irreversible: Fact
    detach_primitive: DetachPrimitive
    spot_available: Fact
    spot_grace_s: int | Special
    shared_fs: str
    inode_cap: int | Literal["none", "unknown", "host-dependent"]
    free_egress: Fact
    china_mirror_needed: Fact
    host_driver_cuda_max: str
    local_nvme: str
    stop_means: str  # what "stop" is on this platform: the survival matrix's first column
    destroy_means: str  # and what "destroy" is: its second column
    durable_dir: str
    data_dir: str
    mounts: tuple[Mount, ...]
    path: Path
    origin: Origin
    title: str = ""
    summary: str = ""
    detach_how: str = ""
    danger_clocks: tuple[DangerClock, ...] = ()
    # Mean time between interruptions (preemption, reclaim, disconnect) in seconds: the mu of
    # the Young/Daly checkpoint interval (principle 8). hosts.toml mtbf_hours overrides it.
    mtbf_s: int | Special = "unknown"
    surface: Surface = field(default_factory=Surface)
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.platform

    def watch_paths(self) -> list[str]:
        """Mount paths the probe can statvfs (those with a known path)."""
        return [m.path for m in self.mounts if m.path != "unknown"]


# ----------------------------------------------------------------------------- checkers
# A checker takes (file, dotted field path, raw value) and returns the typed value or raises.
Checker = Callable[[Path, str, object], Any]


def _type_name(value: object) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(value), type(value).__name__)


def _wrong(path: Path, where: str, value: object, expected: str, example: str) -> ProfileError:
    return _error(path, where, f"expected {expected}, got {_type_name(value)} ({value!r})",
                  f"write e.g. {where.rsplit('.', 1)[-1]} = {example}")


def _string(example: str = '"..."', *, empty_ok: bool = False) -> Checker:
    def check(path: Path, where: str, value: object) -> str:
        if not isinstance(value, str) or (not value and not empty_ok):
            raise _wrong(path, where, value, "a non-empty string", example)
        return value
    return check


def _boolean(path: Path, where: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise _wrong(path, where, value, "true or false", "true")
    return value


def _choice(allowed: tuple[str, ...], *, bool_ok: bool = False, int_ok: bool = False) -> Checker:
    """A value from a fixed set of strings, optionally also a boolean or an integer >= 0."""
    kinds = (["true/false"] if bool_ok else []) + (["an integer >= 0"] if int_ok else [])
    expected = " or ".join([*kinds, "one of " + ", ".join(repr(a) for a in allowed)])

    def check(path: Path, where: str, value: object) -> object:
        if isinstance(value, bool):
            if bool_ok:
                return value
        elif isinstance(value, int):
            if int_ok and value >= 0:
                return value
        elif isinstance(value, str) and value in allowed:
            return value
        if isinstance(value, str):
            raise _error(path, where, f"{value!r} is not allowed here",
                         f"use {expected}")
        raise _wrong(path, where, value, expected,
                     "true" if bool_ok else ("30" if int_ok else repr(allowed[0])))
    return check


def _literal_values(tp: object) -> tuple[str, ...]:
    """The strings of a Literal, possibly inside a union (``bool | Literal[...]``)."""
    out: list[str] = []
    for arg in get_args(tp):
        if isinstance(arg, str):
            out.append(arg)
        else:
            out.extend(_literal_values(arg))
    return tuple(out)


def _str_list(path: Path, where: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise _wrong(path, where, value, "an array of strings", '["..."]')
    for i, item in enumerate(value):
        if not isinstance(item, str) or not item:
            raise _wrong(path, f"{where}[{i}]", item, "a non-empty string", '"..."')
    return tuple(value)


def _str_table(path: Path, where: str, value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _wrong(path, where, value, "a table of strings", '{ field = "principle 4" }')
    for key, item in value.items():
        if not isinstance(item, str) or not item:
            raise _error(path, f"{where}.{key}", f"expected a non-empty string, got "
                         f"{_type_name(item)}", "name the gotcha id or principle behind the fact "
                         "(docs/GOTCHAS.md)")
    return dict(value)


@dataclass(frozen=True)
class _Spec:
    check: Checker
    required: bool = True


def _table(path: Path, where: str, raw: object, specs: Mapping[str, _Spec]) -> dict[str, Any]:
    """Check one TOML table against its spec: unknown keys, missing keys, each value."""
    if not isinstance(raw, dict):
        raise _error(path, where or "top level", f"expected a table, got {_type_name(raw)}",
                     f"write it as [{where}]" if where else "write key = value lines")
    prefix = f"{where}." if where else ""
    for key in raw:
        if key not in specs:
            raise _error(path, f"{prefix}{key}", "unknown key",
                         "remove it or correct the spelling (known: "
                         + ", ".join(sorted(specs)) + ")")
    out: dict[str, Any] = {}
    for key, spec in specs.items():
        if key in raw:
            out[key] = spec.check(path, f"{prefix}{key}", raw[key])
        elif spec.required:
            raise _error(path, f"{prefix}{key}", "missing required field",
                         f"add {key} = ... (\"unknown\" when you do not know it)")
    return out


def _array_of_tables(specs: Mapping[str, _Spec], build: Callable[..., Any]) -> Checker:
    def check(path: Path, where: str, value: object) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise _error(path, where, f"expected an array of tables, got {_type_name(value)}",
                         f"write each entry as a [[{where}]] block")
        return tuple(build(**_table(path, f"{where}[{i}]", item, specs))
                     for i, item in enumerate(value))
    return check


def _surface(path: Path, where: str, value: object) -> Surface:
    specs = {"dangers": _Spec(_str_list, False), "conveniences": _Spec(_str_list, False),
             "notes": _Spec(_str_list, False)}
    return Surface(**_table(path, where, value, specs))


_SURVIVAL = _choice(_literal_values(Survival), bool_ok=True)

_MOUNT_SPECS: dict[str, _Spec] = {
    "path": _Spec(_string('"/workspace"')),
    "role": _Spec(_string('"volume disk"')),
    "survives_stop": _Spec(_SURVIVAL),
    "survives_destroy": _Spec(_SURVIVAL),
    "note": _Spec(_string(empty_ok=True), False),
    "source": _Spec(_string('"principle 4"'), False),
}

_CLOCK_SPECS: dict[str, _Spec] = {
    "kind": _Spec(_choice(_literal_values(ClockKind))),
    "seconds": _Spec(_choice(_literal_values(ClockSeconds), int_ok=True)),
    "text": _Spec(_string()),
    "approximate": _Spec(_boolean, False),
    "source": _Spec(_string('"principle 10"'), False),
}

_FACT = _choice(_literal_values(Special), bool_ok=True)

_PROFILE_SPECS: dict[str, _Spec] = {
    "platform": _Spec(_string('"runpod"')),
    "title": _Spec(_string('"RunPod"'), False),
    "summary": _Spec(_string(), False),
    "kind": _Spec(_choice(_literal_values(Kind))),
    "meter_stop_verb": _Spec(_string('"terminate"')),
    "meter_stop_irreversible": _Spec(_FACT),
    "detach_primitive": _Spec(_choice(_literal_values(DetachPrimitive))),
    "detach_how": _Spec(_string(), False),
    "spot_available": _Spec(_FACT),
    "spot_grace_s": _Spec(_choice(_literal_values(Special), int_ok=True)),
    "shared_fs": _Spec(_string('"unknown"')),
    "inode_cap": _Spec(_choice(("none", "unknown", "host-dependent"), int_ok=True)),
    "free_egress": _Spec(_FACT),
    "china_mirror_needed": _Spec(_FACT),
    "host_driver_cuda_max": _Spec(_string('"unknown"')),
    "local_nvme": _Spec(_string('"unknown"')),
    "stop_means": _Spec(_string('"stop the pod"')),
    "destroy_means": _Spec(_string('"terminate the pod"')),
    "durable_dir": _Spec(_string('"/workspace"')),
    "data_dir": _Spec(_string('"unknown"')),
    "mounts": _Spec(_array_of_tables(_MOUNT_SPECS, Mount)),
    "danger_clocks": _Spec(_array_of_tables(_CLOCK_SPECS, DangerClock), False),
    "mtbf_s": _Spec(_choice(_literal_values(Special), int_ok=True), False),
    "surface": _Spec(_surface, False),
    "sources": _Spec(_str_table, False),
}


def _source_target_exists(data: Mapping[str, Any], dotted: str) -> bool:
    """Whether a [sources] key such as ``mounts[1].survives_stop`` names a field in the file."""
    node: Any = data
    for part in dotted.split("."):
        m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)((?:\[\d+\])*)", part)
        if m is None or not isinstance(node, dict) or m.group(1) not in node:
            return False
        node = node[m.group(1)]
        for index in re.findall(r"\[(\d+)\]", m.group(2)):
            if not isinstance(node, list) or int(index) >= len(node):
                return False
            node = node[int(index)]
    return True


def parse_profile(text: str, path: Path, origin: Origin = "user") -> Profile:
    """Validate a profile's TOML text; ``path`` is named in every error."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _TOML_LINE_RE.search(str(exc))
        where = f"line {m.group(1)}" if m else "TOML syntax"
        raise _error(path, where, f"not valid TOML ({exc})",
                     "correct the syntax at that line (strings need quotes, "
                     "mounts are [[mounts]] blocks)") from exc
    values = _table(path, "", data, _PROFILE_SPECS)
    if values["platform"] != path.stem:
        raise _error(path, "platform", f"{values['platform']!r} does not match the file name",
                     f"set platform = \"{path.stem}\" or rename the file to "
                     f"{values['platform']}.toml")
    for key in values.get("sources", {}):
        if not _source_target_exists(data, key):
            raise _error(path, f"sources.{key}", "names no field of this profile",
                         "use a dotted field path such as mounts[0].survives_stop")
    return Profile(path=path, origin=origin, **values)


def load_profile_file(path: Path | str, origin: Origin = "user") -> Profile:
    """Read and validate one profile file."""
    path = Path(path)
    try:
        text = read_regular(path, "the profile").decode("utf-8")
    except LocalFileError as exc:
        raise _error(path, "reading", exc.reason, exc.fix or "") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _error(path, "reading", str(exc),
                     "check that the file exists, is readable and is UTF-8") from exc
    return parse_profile(text, path, origin)


def user_profile_dir() -> Path:
    """Where a user's own profiles live; one here overrides the packaged one of that name."""
    return Path(platformdirs.user_config_dir("gpuroom")) / "profiles"


def _names_in(directory: Path) -> set[str]:
    try:
        return {p.stem for p in directory.glob("*.toml") if _NAME_RE.match(p.stem)}
    except OSError:
        return set()


def list_profiles(user_dir: Path | None = None) -> list[str]:
    """Names of every profile, packaged and the user's, sorted (loading none of them)."""
    user_dir = user_profile_dir() if user_dir is None else user_dir
    return sorted(_names_in(PACKAGED_DIR) | _names_in(user_dir))


def profile_path(name: str, user_dir: Path | None = None) -> tuple[Path, Origin]:
    """The file a name resolves to: the user's if present, else the packaged one."""
    user_dir = user_profile_dir() if user_dir is None else user_dir
    if _NAME_RE.match(name):
        user_file = user_dir / f"{name}.toml"
        if user_file.is_file():
            return user_file, "user"
        packaged = PACKAGED_DIR / f"{name}.toml"
        if packaged.is_file():
            return packaged, "packaged"
    raise UnknownProfileError(name, list_profiles(user_dir))


def load_profile(name: str, user_dir: Path | None = None) -> Profile:
    """The profile called ``name``.

    ``user_config_dir("gpuroom")/profiles/NAME.toml`` overrides the packaged NAME.toml;
    ``user_dir`` replaces that directory (tests, a --profiles-dir option). An unknown name
    raises UnknownProfileError listing the known ones; a bad file raises ProfileError.
    """
    path, origin = profile_path(name, user_dir)
    return load_profile_file(path, origin)
