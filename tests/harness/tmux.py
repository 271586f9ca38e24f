"""A private tmux server with one pane running a program, for end-to-end tests of the TUI.

The pane is driven with `tmux send-keys` and read with `tmux capture-pane -p`, so the program
sees a real terminal (tmux's, with the TERM we choose) and a real key stream, as a user in
tmux over SSH would. The server is private (its socket and config file live in the test's
dir) and `kill()` ends it with everything in it; `remain-on-exit` keeps an exited pane around
so a test can read the program's exit status instead of racing the server's own exit.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

TMUX_TIMEOUT_S = 10.0  # one tmux client call; the server answers in milliseconds
POLL_S = 0.1
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux


class TmuxUnavailable(RuntimeError):
    """tmux is not installed (apt-get install tmux)."""


class ScreenTimeout(AssertionError):
    """What a test waited for did not appear; the message carries the last screen."""


def find_tmux() -> str | None:
    return shutil.which("tmux")


@dataclass
class TmuxPane:
    """One detached session on a private server; its single pane runs the program."""

    tmux_bin: str
    socket: Path
    session: str
    width: int
    height: int
    last_screen: str = field(default="", repr=False)

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        cwd: Path,
        config_dir: Path,
        width: int = 120,
        height: int = 40,
        default_terminal: str = "screen-256color",
    ) -> TmuxPane:
        """Start a server and run argv (exec'd directly, no shell) in its only pane.

        tmux sets the pane's TERM from default-terminal, so that is where the terminal type is
        chosen; env is the server's environment and so the program's (minus TERM).
        """
        tmux_bin = find_tmux()
        if tmux_bin is None:
            raise TmuxUnavailable("tmux not installed: apt-get install tmux")
        if not argv:
            raise ValueError("argv is empty")
        conf = config_dir / "tmux.conf"
        # Read when the server starts, so the options hold before the program runs.
        conf.write_text(
            f'set-option -g default-terminal "{default_terminal}"\n'
            "set-option -g remain-on-exit on\n"
            "set-option -g status off\n"
            "set-option -g history-limit 0\n"
            "set-option -sg escape-time 0\n"
        )
        # The socket lives with the test's files (nothing left in /tmp/tmux-UID); a unix
        # socket path has to fit sun_path.
        socket = config_dir / "tmux.sock"
        if len(str(socket)) > MAX_SOCKET_PATH:
            raise ValueError(f"tmux socket path too long for a unix socket: {socket}")
        pane = cls(
            tmux_bin=tmux_bin,
            socket=socket,
            session="e2e",
            width=width,
            height=height,
        )
        server_env = {k: v for k, v in env.items() if k not in ("TMUX", "TMUX_PANE")}
        # tmux 3.x runs a multi-word command with execvp: argv reaches the program as given.
        done = subprocess.run(
            [
                tmux_bin, "-u", "-S", str(pane.socket), "-f", str(conf),
                "new-session", "-d", "-s", pane.session, "-x", str(width), "-y", str(height),
                "-c", str(cwd), "--", *argv,
            ],
            env=server_env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=TMUX_TIMEOUT_S, check=False,
        )
        if done.returncode != 0:
            pane.kill()
            raise RuntimeError(f"tmux new-session failed ({done.returncode}): {done.stderr}")
        return pane

    def tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """One tmux client command against this server."""
        done = subprocess.run(
            [self.tmux_bin, "-u", "-S", str(self.socket), *args],
            stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=TMUX_TIMEOUT_S, check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(
                f"tmux {' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}"
            )
        return done

    @property
    def target(self) -> str:
        return f"{self.session}:0.0"

    def capture(self, *, escapes: bool = False) -> str:
        """The visible screen as text (with SGR sequences when escapes)."""
        args = ["capture-pane", "-p", "-t", self.target]
        if escapes:
            args.insert(1, "-e")
        text = self.tmux(*args).stdout
        if not escapes:
            self.last_screen = text
        return text

    def send_keys(self, *keys: str) -> None:
        """tmux key names (Enter, Escape, Tab, BSpace, C-u) or single characters."""
        self.tmux("send-keys", "-t", self.target, *keys)

    def send_text(self, text: str) -> None:
        """Literal text, each character typed as itself (no key-name lookup)."""
        self.tmux("send-keys", "-t", self.target, "-l", text)

    def wait_until(
        self, predicate: Callable[[str], bool], timeout: float, what: str
    ) -> str:
        """Poll the screen until predicate(screen) holds; return that screen.

        Raises ScreenTimeout with what and the last screen seen.
        """
        deadline = time.monotonic() + timeout
        while True:
            screen = self.capture()
            if predicate(screen):
                return screen
            status = self.dead_status()
            if status is not None:
                raise ScreenTimeout(
                    f"the program exited ({status}) while waiting for {what}; "
                    f"last screen:\n{self.last_screen}"
                )
            if time.monotonic() >= deadline:
                raise ScreenTimeout(
                    f"{what} not on screen after {timeout:.0f} s; last screen:\n"
                    f"{self.last_screen}"
                )
            time.sleep(POLL_S)

    def wait_for(self, text: str, timeout: float) -> str:
        """Poll until text is on screen; return the screen."""
        return self.wait_until(lambda screen: text in screen, timeout, repr(text))

    def dead_status(self) -> int | None:
        """The program's exit status once it has exited (remain-on-exit), else None.

        Death by a signal is returned as the negative signal number, as subprocess does.
        tmux marks the pane dead when its pty closes, which can come before it reaps the
        process: until the status is known this says None, as for a live program.
        """
        dead, status, sig = self._pane_dead()
        if not dead:
            return None
        if status is None and sig is None:
            # Debian's tmux closes a dead pane's pty through libutempter, which forks a helper
            # with SIGCHLD set to SIG_DFL for a moment; a program exiting inside that moment
            # loses its SIGCHLD and tmux never reaps it. A second SIGCHLD makes tmux run its
            # usual waitpid loop, which records the real status.
            server = self.server_pid()
            if server is not None:
                os.kill(server, signal.SIGCHLD)
            dead, status, sig = self._pane_dead()
        if status is not None:
            return status
        return None if sig is None else -sig

    def _pane_dead(self) -> tuple[bool, int | None, int | None]:
        done = self.tmux(
            "display-message", "-p", "-t", self.target,
            "#{pane_dead}:#{pane_dead_status}:#{pane_dead_signal}",
            check=False,
        )
        if done.returncode != 0:
            return False, None, None
        # Empty fields stay in place (a signal death has no status, an exit no signal).
        words = [*done.stdout.strip().split(":"), "", "", ""]
        status = int(words[1]) if words[1].isdigit() else None
        sig = int(words[2]) if words[2].isdigit() else None
        return words[0] == "1", status, sig

    def wait_exit(self, timeout: float) -> int:
        """Wait for the program to exit; return its status."""
        deadline = time.monotonic() + timeout
        while True:
            status = self.dead_status()
            if status is not None:
                return status
            if time.monotonic() >= deadline:
                self.capture()
                raise ScreenTimeout(
                    f"the program did not exit within {timeout:.0f} s "
                    f"({self._process_state()}); last screen:\n{self.last_screen}"
                )
            time.sleep(POLL_S)

    def server_pid(self) -> int | None:
        done = self.tmux("display-message", "-p", "#{pid}", check=False)
        text = done.stdout.strip()
        return int(text) if done.returncode == 0 and text.isdigit() else None

    def cursor(self) -> tuple[int, int]:
        """(x, y) of the terminal cursor; Textual keeps it on the focused Input's caret."""
        out = self.tmux("display-message", "-p", "-t", self.target, "#{cursor_x} #{cursor_y}")
        x, _, y = out.stdout.strip().partition(" ")
        return int(x), int(y)

    def env_of_program(self) -> dict[str, str]:
        """The environment the pane's program runs with, from /proc (Linux)."""
        pid = self.pane_pid()
        if pid is None:
            return {}
        raw = Path(f"/proc/{pid}/environ").read_bytes()
        pairs = (item.decode(errors="replace").partition("=") for item in raw.split(b"\0") if item)
        return {k: v for k, _, v in pairs}

    def _process_state(self) -> str:
        """The pane program's and its parent's /proc state, for a failure message."""
        pid = self.pane_pid()
        if pid is None:
            return "no pane pid"
        return "; ".join(_proc_summary(p) for p in (pid, _ppid(pid)) if p is not None)

    def pane_pid(self) -> int | None:
        done = self.tmux("display-message", "-p", "-t", self.target, "#{pane_pid}", check=False)
        text = done.stdout.strip()
        return int(text) if done.returncode == 0 and text.isdigit() else None

    def kill(self) -> None:
        """End the server and every pane in it (SIGHUP to the programs); idempotent."""
        subprocess.run(
            [self.tmux_bin, "-S", str(self.socket), "kill-server"],
            stdin=subprocess.DEVNULL, capture_output=True, timeout=TMUX_TIMEOUT_S, check=False,
        )
        self.socket.unlink(missing_ok=True)


def _ppid(pid: int) -> int | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    line = next((ln for ln in status.splitlines() if ln.startswith("PPid:")), "")
    value = line.partition(":")[2].strip()
    return int(value) if value.isdigit() else None


def _proc_summary(pid: int) -> str:
    keep = ("Name:", "State:", "PPid:", "SigBlk:", "SigIgn:", "SigCgt:")
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError as exc:
        return f"pid {pid}: {exc}"
    fields = " ".join(" ".join(ln.split()) for ln in status.splitlines() if ln.startswith(keep))
    return f"pid {pid} {fields} wchan {wchan}"
