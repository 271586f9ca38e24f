"""`gpuroom web` in a real headless Chromium (Debian's chromium and chromedriver, driven by
Selenium; no browser is downloaded): the page served by textual-serve runs the room, whose
hosts table shows the test sshd's box with its GPUs (the nvidia-smi replay). The screenshot
goes to screenshots/web-chromium.png, which the README shows, when GPUROOM_SCREENSHOTS=1 (as
`make screenshots` runs it), else to the test's temp dir so a test run leaves the tree as it
was. Skipped, with the reason, where no browser can start."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import gpubox
from paths import ROOT

WAIT_S = 90.0
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
SCREENSHOT_NAME = "web-chromium.png"
# xterm.js draws the room on a canvas, so the page has no text to read: this keeps what the
# websocket delivers to the terminal (the room's screen as escape sequences), bounded.
TAP_WEBSOCKET = """
(() => {
  const Real = window.WebSocket;
  window.__screen = "";
  window.WebSocket = function (...args) {
    const ws = new Real(...args);
    const decoder = new TextDecoder();
    ws.addEventListener("message", (e) => {
      if (typeof e.data !== "string") {
        window.__screen = (window.__screen + decoder.decode(e.data, {stream: true}))
          .slice(-2000000);
      }
    });
    return ws;
  };
  window.WebSocket.prototype = Real.prototype;
})();
"""
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")


def _browser() -> Any:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError as exc:
        pytest.skip(f"selenium is not installed ({exc}); pip install -e '.[dev]'")
    if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
        pytest.skip("no chromium/chromedriver (apt-get install chromium chromium-driver; "
                    "make system-deps does it as root)")
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,820", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    try:
        return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    except Exception as exc:  # WebDriverException, or the binary failing to start
        pytest.skip(f"headless chromium did not start: {str(exc).splitlines()[0]}")


@pytest.fixture
def web_config(sshd_box: Any, fixtures: Path, tmp_path: Path) -> Iterator[Path]:
    with gpubox.gpu_box_config(sshd_box, fixtures, tmp_path, "webbox", poll_interval_s=1.0,
                               price_per_hour=1.5) as path:
        yield path


@pytest.mark.sshd
@pytest.mark.slow
def test_the_room_in_a_headless_chromium_shows_the_box(web_config: Path,
                                                       tmp_path: Path) -> None:
    driver = _browser()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    # Its own session, so the rooms textual-serve starts per tab end with it.
    web = subprocess.Popen(
        [sys.executable, "-m", "gpuroom.tui.cli.main", "--config", str(web_config), "web",
         "--listen", "127.0.0.1:0"], stdout=(tmp_path / "web.out").open("w"),
        stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + WAIT_S
        while not (tmp_path / "web.out").read_text().endswith("\n"):
            said = (tmp_path / "web.out").read_text()
            assert time.monotonic() < deadline and web.poll() is None, said
            time.sleep(0.2)
        said = (tmp_path / "web.out").read_text()
        assert said.startswith("gpuroom web: serving the room at http://127.0.0.1:"), said
        url = said.split()[6]  # the page, its assets and its socket need its token
        assert "?token=" in url, said
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument",
                               {"source": TAP_WEBSOCKET})
        driver.get(url)
        screen = ""
        while not ("webbox" in screen and "3090" in screen):
            assert time.monotonic() < deadline, screen[-3000:]
            time.sleep(0.5)
            screen = ESCAPES.sub("", driver.execute_script("return window.__screen") or "")
        time.sleep(1.0)  # let the canvas draw the frame the stream carried
        folder = ROOT / "screenshots" if os.environ.get("GPUROOM_SCREENSHOTS") else tmp_path
        shot = folder / SCREENSHOT_NAME
        assert driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        driver.quit()
        os.killpg(web.pid, signal.SIGTERM)
        try:
            web.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(web.pid, signal.SIGKILL)
            web.wait(timeout=30)
