"""The job's log says where each attempt begins and how it ended, each on its own line, even
after a progress bar that ends its frames with a carriage return and no newline."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.queuebox import Box, queue_box, wait_until


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    yield from queue_box(tmp_path)


TQDM_THEN_FAIL = ("import sys\n"
                  "for i in range(3):\n"
                  "    sys.stdout.write(f'\\rstep {i}/3'); sys.stdout.flush()\n"
                  "sys.exit(1)\n")


def test_attempt_headers_and_ends_each_on_their_own_line(box: Box) -> None:
    job = box.add(sys.executable, "-c", TQDM_THEN_FAIL,
                  opts=("--retries", "1", "--retry-on-exit"))
    log = box.qdir / "logs" / f"{job}.log"

    def twice() -> bool:
        text = log.read_bytes().decode() if log.exists() else ""
        return text.count("ended: exit 1") == 2

    wait_until(twice, 20, "both attempts ended in the log")
    lines = log.read_bytes().decode().split("\n")  # keep the bar's \r as written
    starts = [line for line in lines if re.match(rf"=== gpuroom {job} attempt \d ", line)]
    ends = [line for line in lines if re.match(r"=== gpuroom: attempt \d ended: ", line)]
    assert len(starts) == 2, lines
    assert [e.split(" after ")[0] for e in ends] == [
        "=== gpuroom: attempt 1 ended: exit 1", "=== gpuroom: attempt 2 ended: exit 1"], lines
    assert "\rstep 2/3" in lines[lines.index(ends[0]) - 1]  # the bar's last frame, then ours
    assert [a["error_line"] for a in box.job(job)["attempts"]] == [None, None]


def test_the_last_error_line_is_recorded_with_the_failed_attempt(box: Box) -> None:
    """What the doctor quotes: the log's last error line, above the progress bar's frames."""
    fail = ("import sys\n"
            "print('ValueError: batch 4096 does not fit', flush=True)\n"
            "for i in range(3):\n"
            "    sys.stdout.write(f'\\rstep {i}/3'); sys.stdout.flush()\n"
            "sys.exit(2)\n")
    job = box.add(sys.executable, "-c", fail)
    final = box.wait_state(job, ("failed",))
    assert final["attempts"][-1]["error_line"] == "ValueError: batch 4096 does not fit"
    ok = box.add(sys.executable, "-c", "print('error: only a word in a line'); print('ok')")
    assert box.wait_state(ok, ("succeeded",))["attempts"][-1]["error_line"] is None
