"""hosts.toml: which boxes gpuroom watches and how to reach them.

Read with tomllib; edited with tomlkit, which keeps the user's comments and layout, mode
0600, the previous file kept as hosts.toml.bak. File-level problems (not TOML, wrong
types at the top) raise ConfigError naming the file, the line or key and the fix. A problem
with one host (no ssh alias, an alias that could inject options) is kept on that host as
``error`` so every other host still works.
"""

from __future__ import annotations

import difflib
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import platformdirs
import tomlkit
import tomlkit.exceptions

from gpuroom.remote.preempt import CLOUDS
from gpuroom.tui.errors import GpuroomError, with_fix
from gpuroom.tui.localfile import read_regular
from gpuroom.tui.webhook_url import UrlRefused, request_url

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 jump hosts
    import tomli as tomllib

LOCAL = "local"
DEFAULT_PROFILE = "generic-ssh"
# An alias is passed to asyncssh and, for `s`, to the ssh binary as an argv element; anything
# beyond these characters is either a typo or an attempt to smuggle an option or a shell word.
_ALIAS_RE = re.compile(r"^[A-Za-z0-9_.@%+:\[\]-]+$")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


class ConfigError(GpuroomError):
    """A config file gpuroom cannot use at all; the message names file and place."""

    exit_code = 2  # tui/cli/main.py: usage or config error


def default_config_path() -> Path:
    return Path(platformdirs.user_config_dir("gpuroom")) / "hosts.toml"


def default_ssh_config_path() -> Path:
    return Path("~/.ssh/config").expanduser()


def check_alias(alias: str) -> str | None:
    """Why an ssh alias is unusable, or None when it is fine."""
    if not alias:
        return "the ssh alias is empty"
    if alias.startswith("-"):
        return f"ssh alias {alias!r} starts with '-' and would be read as an option"
    if not _ALIAS_RE.match(alias):
        return (f"ssh alias {alias!r} contains characters that are not allowed in a host name "
                "(spaces or shell metacharacters such as ; | $ ` & < > ( ) quotes)")
    return None


@dataclass
class HostConfig:
    """One host as hosts.toml describes it."""

    name: str
    ssh: str | None = None  # alias in the ssh config; None for the local host
    local: bool = False
    # A local host receives moved or failed-over jobs only when hosts.toml says so.
    accept_moves: bool = False
    # `gpuroom mcp --allow-actions` may act here (add, kill, relaunch, pull); false: read only.
    mcp_actions: bool = True
    profile: str = DEFAULT_PROFILE
    price_per_hour: float | None = None
    mounts: list[str] = field(default_factory=list)
    pull_to: str | None = None
    teardown_command: list[str] | None = None
    python: str = "python3"  # the box's interpreter for the helper (>= 3.8)
    # When billing started, if not at the box's boot (a stopped-then-started box, a reused one).
    rented_at: float | None = None
    spot: str | None = None  # a spot box of this cloud (aws | gcp | azure): notices (U45)
    # A running job with no sign of life this long on idle GPUs is stalled (issue 19 item 1).
    stall_after_min: float | None = None
    # A running GPU job with no process on its idle GPUs this long trains on the CPU (U31).
    cpu_training_after_min: float | None = None
    # Mean hours between interruptions of this box: overrides the profile's mtbf_s (the
    # Young/Daly checkpoint cadence, principle 8).
    mtbf_hours: float | None = None
    code: str | None = None  # the user's own tree of what runs on this box (U42)
    # Mirror running jobs' checkpoints home (tui/fleet/mirror.py); None: on where the profile
    # says the box can vanish (spot), off elsewhere.
    mirror: bool | None = None
    # The box's work tree (absolute): `queue move` maps a moved job's cwd, argv and env paths
    # under the old host's workdir to the new host's (tui/fleet/move.py map_path).
    workdir: str | None = None
    error: str | None = None  # set when this host cannot be used; the others still work

    @property
    def mtbf_s(self) -> float | None:
        return None if self.mtbf_hours is None else 3600.0 * self.mtbf_hours

    @property
    def stall_after_s(self) -> float | None:
        return None if self.stall_after_min is None else 60.0 * self.stall_after_min

    @property
    def cpu_training_after_s(self) -> float | None:
        return None if self.cpu_training_after_min is None else 60.0 * self.cpu_training_after_min

    def to_toml(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.local:
            out["local"] = True
        if self.accept_moves:
            out["accept_moves"] = True
        if not self.mcp_actions:
            out["mcp_actions"] = False
        if self.ssh is not None:
            out["ssh"] = self.ssh
        if self.profile != DEFAULT_PROFILE:
            out["profile"] = self.profile
        if self.price_per_hour is not None:
            out["price_per_hour"] = self.price_per_hour
        if self.mounts:
            out["mounts"] = list(self.mounts)
        if self.pull_to:
            out["pull_to"] = self.pull_to
        if self.teardown_command:
            out["teardown_command"] = list(self.teardown_command)
        if self.spot:
            out["spot"] = self.spot
        if self.python != "python3":
            out["python"] = self.python
        if self.rented_at is not None:
            out["rented_at"] = datetime.fromtimestamp(self.rented_at, tz=timezone.utc)
        if self.stall_after_min is not None:
            out["stall_after_min"] = self.stall_after_min
        if self.cpu_training_after_min is not None:
            out["cpu_training_after_min"] = self.cpu_training_after_min
        if self.mtbf_hours is not None:
            out["mtbf_hours"] = self.mtbf_hours
        if self.code:
            out["code"] = self.code
        if self.mirror is not None:
            out["mirror"] = self.mirror
        if self.workdir is not None:
            out["workdir"] = self.workdir
        return out


@dataclass
class Settings:
    poll_interval_s: float = 5.0
    down_after_s: float = 120.0  # STALE for this long without an answer -> DOWN
    ssh_config: str | None = None  # defaults to ~/.ssh/config
    poll_mode: str = "serve"  # or "exec"
    bell: bool = False  # ring the terminal bell once per new critical banner item
    # argv run once per new critical item, the item's text appended as the last argument.
    notify_command: list[str] | None = None
    # Each new critical item POSTed there as JSON (tui/transport/notify_http.py).
    notify_url: str | None = None
    # A critical item that stays is alerted again after this long (bell, command and URL).
    renotify_s: float = 3600.0
    mirror_keep: int = 2  # checkpoints of each mirrored job kept home, newest first
    mirror_bwlimit_kbps: int | None = None  # the mirror's pulls through rsync --bwlimit
    # A job added with --failover is moved once its host has been DOWN this long
    failover_after_s: float = 600.0


@dataclass
class Config:
    path: Path
    hosts: dict[str, HostConfig] = field(default_factory=dict)
    settings: Settings = field(default_factory=Settings)
    # Problems that do not stop gpuroom but that the user should hear of once.
    warnings: list[str] = field(default_factory=list)

    def __iter__(self) -> Iterator[HostConfig]:
        return iter(self.hosts.values())

    def effective_hosts(self) -> list[HostConfig]:
        """The configured hosts, or the local machine when nothing is configured."""
        if self.hosts:
            return list(self.hosts.values())
        return [HostConfig(name=LOCAL, local=True)]

    def ssh_config_path(self) -> Path:
        if self.settings.ssh_config:
            return Path(self.settings.ssh_config).expanduser()
        return default_ssh_config_path()


def _err(path: Path, where: str, reason: str, fix: str) -> ConfigError:
    return ConfigError(f"{path}: {where}: {reason}", fix)


_HOST_KEYS = {"ssh", "local", "accept_moves", "profile", "price_per_hour", "mounts", "pull_to",
              "teardown_command", "python", "rented_at", "stall_after_min",
              "cpu_training_after_min", "mtbf_hours", "spot", "mirror", "workdir",
              "code", "mcp_actions"}


def _parse_host(path: Path, name: str, raw: Any) -> HostConfig:
    """One [hosts.NAME] table. Problems become HostConfig.error, never an exception."""
    host = HostConfig(name=name)
    where = f"[hosts.{name}]"
    if not _NAME_RE.match(name):
        host.error = with_fix(f"{path}: {where}: host names may use letters, digits, '.', '_' "
                              "and '-'", "rename the table")
        return host
    if not isinstance(raw, dict):
        host.error = with_fix(f"{path}: {where} must be a table", f"write it as [hosts.{name}]")
        return host
    problems: list[str] = []
    unknown = sorted(set(raw) - _HOST_KEYS)
    if unknown:
        known = ", ".join(sorted(_HOST_KEYS))
        problems.append(f"unknown key(s) {', '.join(unknown)} (known: {known})")
    host.local = raw.get("local") is True
    accept = raw.get("accept_moves", False)
    if isinstance(accept, bool):
        host.accept_moves = accept
    else:
        problems.append("accept_moves must be true or false")
    mcp_actions = raw.get("mcp_actions", True)
    if isinstance(mcp_actions, bool):
        host.mcp_actions = mcp_actions
    else:
        problems.append("mcp_actions must be true or false")
    ssh = raw.get("ssh")
    if host.local:
        host.ssh = None
    elif ssh is None:
        problems.append(f"no ssh alias: add ssh = \"{name}\" naming a Host in your ssh config")
    elif not isinstance(ssh, str):
        problems.append("ssh must be a string naming a Host in your ssh config")
    else:
        reason = check_alias(ssh)
        if reason:
            problems.append(reason + "; use the Host alias from your ssh config")
        host.ssh = ssh
    profile = raw.get("profile", DEFAULT_PROFILE)
    if isinstance(profile, str) and _NAME_RE.match(profile):
        host.profile = profile
    else:
        problems.append("profile must be a profile name such as \"generic-ssh\"")
    price = raw.get("price_per_hour")
    if price is not None:
        if isinstance(price, (int, float)) and not isinstance(price, bool) and price >= 0:
            host.price_per_hour = float(price)
        else:
            problems.append("price_per_hour must be a number >= 0 (dollars per hour)")
    mounts = raw.get("mounts", [])
    if isinstance(mounts, list) and all(isinstance(m, str) and m for m in mounts):
        host.mounts = list(mounts)
    else:
        problems.append("mounts must be a list of paths, e.g. [\"/workspace\"]")
    pull_to = raw.get("pull_to")
    if pull_to is not None:
        if isinstance(pull_to, str) and pull_to:
            host.pull_to = pull_to
        else:
            problems.append("pull_to must be a directory path")
    code = raw.get("code")
    if code is not None:
        if isinstance(code, str) and code and "\n" not in code:
            host.code = code
        else:
            problems.append("code must be the path of your own tree of this box's code, e.g. "
                            "code = \"~/src/proj\"")
    teardown = raw.get("teardown_command")
    if teardown is not None:
        if isinstance(teardown, list) and teardown and all(isinstance(a, str) for a in teardown):
            host.teardown_command = list(teardown)
        else:
            problems.append("teardown_command must be an argv list of strings, not a shell string")
    python = raw.get("python", "python3")
    if isinstance(python, str) and python and check_alias(python.replace("/", "")) is None:
        host.python = python
    else:
        problems.append("python must be an interpreter name or absolute path, e.g. "
                        "\"python3.10\" or \"/opt/conda/bin/python\"")
    rented = raw.get("rented_at")
    if rented is not None:
        at = parse_rented_at(rented)
        if at is None:
            problems.append("rented_at must be a date-time with its offset, e.g. "
                            "rented_at = 2026-11-20T09:30:00Z (TOML, no quotes)")
        else:
            host.rented_at = at
    host.stall_after_min = _minutes(raw, "stall_after_min", 45, problems)
    host.cpu_training_after_min = _minutes(raw, "cpu_training_after_min", 10, problems)
    mtbf = raw.get("mtbf_hours")
    if mtbf is not None:
        if isinstance(mtbf, (int, float)) and not isinstance(mtbf, bool) and mtbf > 0:
            host.mtbf_hours = float(mtbf)
        else:
            problems.append("mtbf_hours must be a number of hours > 0, e.g. mtbf_hours = 3")
    spot = raw.get("spot")
    if spot is not None:
        if spot in CLOUDS:
            host.spot = spot
        else:
            problems.append(f"spot must name the cloud: one of {', '.join(CLOUDS)}")
    mirror = raw.get("mirror")
    if mirror is not None:
        if isinstance(mirror, bool):
            host.mirror = mirror
        else:
            problems.append("mirror must be true or false")
    workdir = raw.get("workdir")
    if workdir is not None:
        if isinstance(workdir, str) and workdir.startswith("/") and "\x00" not in workdir:
            host.workdir = workdir.rstrip("/") or "/"
        else:
            problems.append('workdir must be an absolute path on the box, e.g. "/workspace"')
    if problems:
        host.error = f"{path}: {where}: " + "; ".join(problems)
    return host


def _minutes(raw: dict[str, Any], key: str, example: int, problems: list[str]) -> float | None:
    """A per-host threshold in minutes (> 0), or None when not given; a bad one is a problem."""
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    problems.append(f"{key} must be a number of minutes > 0, e.g. {key} = {example}")
    return None


def parse_rented_at(value: Any) -> float | None:
    """A TOML offset date-time (or the same as an ISO string) as epoch seconds; a date-time
    without an offset is refused: the jump host's and the provider's zones often differ."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.timestamp()
    return None


def _parse_settings(path: Path, raw: Any) -> Settings:
    settings = Settings()
    if raw is None:
        return settings
    if not isinstance(raw, dict):
        raise _err(path, "[settings]", "must be a table", "write it as [settings]")
    for key, value in raw.items():
        if key in ("poll_interval_s", "down_after_s", "renotify_s", "failover_after_s"):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise _err(path, f"[settings] {key}", "must be a positive number of seconds",
                           f"e.g. {key} = 5")
            setattr(settings, key, float(value))
        elif key in ("mirror_keep", "mirror_bwlimit_kbps"):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise _err(path, f"[settings] {key}", "must be a whole number >= 1",
                           f"e.g. {key} = {2 if key == 'mirror_keep' else 20000}")
            setattr(settings, key, value)
        elif key == "ssh_config":
            if not isinstance(value, str):
                raise _err(path, "[settings] ssh_config", "must be a path",
                           "e.g. \"~/.ssh/config\"")
            settings.ssh_config = value
        elif key == "poll_mode":
            if value not in ("serve", "exec"):
                raise _err(path, "[settings] poll_mode", f"{value!r} is not a mode",
                           "use \"serve\" or \"exec\"")
            settings.poll_mode = value
        elif key == "bell":
            if not isinstance(value, bool):
                raise _err(path, "[settings] bell", "must be true or false", "e.g. bell = true")
            settings.bell = value
        elif key == "notify_command":
            if not (isinstance(value, list) and value
                    and all(isinstance(a, str) and a for a in value)):
                raise _err(path, "[settings] notify_command",
                           "must be an argv list of strings, not a shell string",
                           "e.g. notify_command = [\"notify-send\", \"gpuroom\"]")
            settings.notify_command = list(value)
        elif key == "notify_url":
            try:
                request_url(value)
            except UrlRefused as exc:  # the URL may hold a token: never quoted back
                raise _err(path, "[settings] notify_url", exc.reason, exc.fix) from None
            settings.notify_url = value
        else:
            raise _err(path, f"[settings] {key}", "unknown key",
                       "remove it (known: poll_interval_s, down_after_s, ssh_config, poll_mode, "
                       "bell, notify_command, notify_url, renotify_s, mirror_keep, "
                       "mirror_bwlimit_kbps, failover_after_s)")
    return settings


def load_named(named: str | None, *, creating: bool = False) -> Config:
    """The config a verb's ``--config`` names, or the default one when it names none.

    A missing default file is an empty config (the room shows the local machine); a file the
    user named that does not exist is a mistake (a typo would otherwise open an empty room),
    unless the verb is about to write it (``creating``: hosts add / import).
    """
    return load(Path(named) if named else None, must_exist=bool(named) and not creating)


def load(path: Path | None = None, *, must_exist: bool = False) -> Config:
    """Read hosts.toml; a missing file is an empty config unless ``must_exist``."""
    path = (path or default_config_path()).expanduser()
    try:
        text = read_regular(path, "the hosts file").decode("utf-8")
    except FileNotFoundError:
        if must_exist:
            raise _err(path, "reading", "no such file",
                       "check the path given to --config, or leave --config out to use "
                       f"{default_config_path()}") from None
        return Config(path=path)
    except (OSError, UnicodeDecodeError) as exc:
        raise _err(path, "reading", str(exc), "check the file's permissions and encoding") from exc
    warnings = []
    try:
        mode = path.stat().st_mode
    except OSError:
        mode = 0
    if mode & 0o077:
        # It names hosts, prices and the commands that stop paid machines.
        warnings.append(f"{path} can be read by other users (mode {stat.S_IMODE(mode):04o}). "
                        f"Fix: chmod 600 {path}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # tomllib's message carries "(at line N, column M)".
        raise _err(path, "not valid TOML", str(exc),
                   "correct the syntax at that line (strings need quotes, tables [hosts.NAME])",
                   ) from exc
    except RecursionError:  # arrays nested thousands deep: tomllib recurses per level
        raise _err(path, "not valid TOML", "values nested too deep",
                   "write each host as a flat [hosts.NAME] table") from None
    unknown = sorted(set(data) - {"hosts", "settings"})
    if unknown:
        raise _err(path, f"top-level key {unknown[0]!r}", "unknown",
                   "hosts go under [hosts.NAME], options under [settings]")
    hosts_raw = data.get("hosts", {})
    if not isinstance(hosts_raw, dict):
        raise _err(path, "hosts", "must be a table of tables", "write each host as [hosts.NAME]")
    config = Config(path=path, settings=_parse_settings(path, data.get("settings")),
                    warnings=warnings)
    for name, raw in hosts_raw.items():
        if isinstance(raw, dict):
            _refuse_unknown(path, text, f"[hosts.{name}]", raw, _HOST_KEYS)
        config.hosts[name] = _parse_host(path, name, raw)
    return config


def _refuse_unknown(path: Path, text: str, where: str, raw: dict[str, Any],
                    known: Iterable[str]) -> None:
    """A key gpuroom does not know is a typo until shown otherwise: ignored, price_per_hr
    left the host unpriced with no word said. Refused with the nearest known key."""
    for key in raw:
        if key in known:
            continue
        line = next((n for n, ln in enumerate(text.splitlines(), 1)
                     if re.match(rf"\s*{re.escape(key)}\s*=", ln)), None)
        near = difflib.get_close_matches(key, list(known), n=1)
        at = f"{where} line {line}" if line else where
        raise _err(path, at, f"unknown key {key}" + (f", did you mean {near[0]}" if near else ""),
                   f"rename it to {near[0]}" if near else
                   f"remove it (known: {', '.join(sorted(known))})")


def save(config: Config) -> Path | None:
    """Write hosts.toml atomically with mode 0600 (it may name teardown commands).

    The file is edited, not rewritten: a round-trip parse keeps the user's comments, order
    and layout, and only the hosts and settings that differ from ``config`` change (a host
    whose table has a problem is never touched). The previous file is kept as
    ``hosts.toml.bak`` (0600); its path is returned, None when there was no file.
    """
    path = config.path
    try:
        old = read_regular(path, "the hosts file").decode("utf-8")
    except FileNotFoundError:
        old = None
    except (OSError, UnicodeDecodeError) as exc:
        raise _err(path, "reading", str(exc), "check the file's permissions and encoding") from exc
    try:
        doc = tomlkit.parse(old) if old is not None else tomlkit.document()
    except tomlkit.exceptions.ParseError as exc:
        raise _err(path, "not valid TOML", str(exc),
                   "correct the syntax at that line before gpuroom edits the file") from exc
    _sync_settings(doc, config.settings)
    _sync_hosts(path, doc, config.hosts)
    backup = path.with_name(path.name + ".bak") if old is not None else None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if backup is not None:
            _write_private(backup, old or "")
        _write_private(path, tomlkit.dumps(doc))
    except OSError as exc:  # the user's disk or permissions, not a bug
        raise _err(path, "writing", exc.strerror or str(exc),
                   "check the directory's permissions and free space, or give --config") from exc
    return backup


def _write_private(path: Path, text: str) -> None:
    """Replace ``path`` atomically with ``text``, mode 0600 from the first byte."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


_SETTING_KEYS = ("poll_interval_s", "down_after_s", "ssh_config", "poll_mode", "bell",
                 "notify_command", "notify_url", "renotify_s")


def _plain(value: Any) -> Any:
    """A tomlkit item as the Python value tomllib would read."""
    return value.unwrap() if hasattr(value, "unwrap") else value


def _sync_settings(doc: Any, settings: Settings) -> None:
    """Change only the settings whose value differs; a default one is removed."""
    defaults = Settings()
    table = doc.get("settings")
    for key in _SETTING_KEYS:
        want = getattr(settings, key)
        current = _plain(table[key]) if table is not None and key in table else \
            getattr(defaults, key)
        if isinstance(current, int) and not isinstance(current, bool):
            current = float(current)  # poll_interval_s = 5 reads as 5.0
        if current == want:
            continue
        if want == getattr(defaults, key):
            del table[key]
            continue
        if table is None:
            table = doc["settings"] = tomlkit.table()
        table[key] = want


def _sync_hosts(path: Path, doc: Any, hosts: dict[str, HostConfig]) -> None:
    """Add, replace and remove [hosts.NAME] tables to match ``hosts``, leaving alone every
    table that already says the same (and every one gpuroom could not read)."""
    table = doc.get("hosts")
    if table is None:
        if not hosts:
            return
        # [hosts.NAME] headers only, no bare [hosts] above them.
        table = doc["hosts"] = tomlkit.table(is_super_table=True)
    for name in [n for n in table if n not in hosts]:
        del table[name]
    for name, host in hosts.items():
        if name in table:
            if host.error is not None or _parse_host(path, name, _plain(table[name])) == host:
                continue
        item = tomlkit.table()
        for key, value in host.to_toml().items():
            item[key] = value
        table[name] = item
