"""remote/procstat.py: the CPU seconds of a job's process group, read from the real /proc."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from gpuroom.remote import procstat

BUSY = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n" \
       "time.sleep(30)\n"


def test_a_comm_with_spaces_and_parens_is_parsed() -> None:
    line = ("4242 (my (weird) job) S 1 4240 4240 0 -1 4194560 100 0 0 0 "
            "150 50 7 3 20 0 1 0 123 0 0")
    assert procstat.parse_stat(line) == (4240, 150 + 50 + 7 + 3)
    assert procstat.parse_stat("garbage") is None


def test_a_busy_group_counts_its_children_and_a_sleeping_one_does_not_grow() -> None:
    # The leader (sh) spends nothing; its child python burns ~0.6 s of CPU, then sleeps.
    leader = subprocess.Popen(["sh", "-c", f"{sys.executable} -c '{BUSY}'; :"],
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            used = procstat.group_cpu_seconds([leader.pid]).get(leader.pid, 0.0)
            if used >= 0.5:
                break
            assert time.monotonic() < deadline, used
            time.sleep(0.1)
        time.sleep(0.5)
        later = procstat.group_cpu_seconds([leader.pid])[leader.pid]
        assert later - used < 0.3  # asleep now: the counter stays flat
        # The /proc/PID/task/TID/children walk finds what a full scan of /proc finds.
        tree = procstat._group_tree([leader.pid], procstat.PROC)
        assert tree is not None and len(tree) >= 2
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()
    assert procstat.group_cpu_seconds([leader.pid]) == {}  # a group with no process
