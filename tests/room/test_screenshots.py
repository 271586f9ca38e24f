"""`make screenshots` (tui/room/screenshots.py): the real app, recorded scenarios, fixed SVGs."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from paths import ROOT

from gpuroom.tui.room.screenshots import SHOTS, Shot

SVG = "{http://www.w3.org/2000/svg}"

# What each picture exists to show: data from the scenario, not the wording around it (the
# banner's phrasing belongs to the doctor and changes with it).
MUST_SHOW = {
    "healthy-200x60": ["h100-a", "rtx-b", "local", "fleet OK", "step 4040 loss 2.3290"],
    "healthy-80x24": ["h100-a", "rtx-b", "queue h100-a", "llama-1b"],
    "throttle": ["a10-c", "throttl", "HwSlow", "SwPwrCap"],
    "inode": ["h100-a", "/data", "100%"],
    "failed": ["finetune", "failed", "SIGKILL", "epoch 1 step 200"],
    "stale": ["rtx-b", "STALE", "queue rtx-b"],
    "help": ["gpuroom keys", "interactive ssh to the selected host"],
}


def run_module(out: Path, *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "gpuroom.tui.room.screenshots", str(out), *args],
        check=True, cwd=ROOT, capture_output=True, timeout=120,
    )


def svg_text(path: Path) -> tuple[ET.Element, str]:
    root = ET.parse(path).getroot()  # raises on anything that is not well-formed XML
    text = "".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))
    return root, text.replace("\xa0", " ")


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("shots")
    run_module(out)
    return out


def test_every_screenshot_is_written(shots: Path) -> None:
    assert sorted(p.stem for p in shots.iterdir()) == sorted(s.name for s in SHOTS)
    assert set(MUST_SHOW) == {s.name for s in SHOTS}


@pytest.mark.parametrize("shot", SHOTS, ids=[s.name for s in SHOTS])
def test_screenshot_is_svg_showing_its_scenario(shots: Path, shot: Shot) -> None:
    root, text = svg_text(shots / f"{shot.name}.svg")
    assert root.tag == f"{SVG}svg"
    assert shot.title in text  # the fixed window title, not a date or the app's title
    for needle in MUST_SHOW[shot.name]:
        assert needle in text, f"{shot.name}: {needle!r} not on screen"
    # The scenario logs carry OSC 52 and colour escapes: none may reach a picture either.
    assert "\x1b" not in (shots / f"{shot.name}.svg").read_text()


def test_terminal_size_sets_picture_size(shots: Path) -> None:
    def box(name: str) -> tuple[float, float]:
        root, _ = svg_text(shots / f"{name}.svg")
        _, _, w, h = (float(v) for v in root.get("viewBox", "").split())
        return w, h

    small, mid, big = box("healthy-80x24"), box("throttle"), box("healthy-200x60")
    assert small[0] < mid[0] < big[0]
    assert small[1] < mid[1] < big[1]


def test_same_inputs_write_the_same_bytes(shots: Path, tmp_path: Path) -> None:
    run_module(tmp_path, "--only", "healthy-80x24")
    assert [p.name for p in tmp_path.iterdir()] == ["healthy-80x24.svg"]
    again = (tmp_path / "healthy-80x24.svg").read_bytes()
    assert again == (shots / "healthy-80x24.svg").read_bytes()
