"""Enter on a job: the job in full, as `gpuroom queue show` prints it (issue 20 item 1).

The screen opens at once with what the room already knows and asks the box for the rest in a
worker (the fleet's ``queue_show``); the rows come from tui/present/jobdetail.py, the CLI's
own, so the room and ``queue show`` never disagree.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from textual import work

from gpuroom.tui.errors import GpuroomError
from gpuroom.tui.present.detail import Rows
from gpuroom.tui.present.jobdetail import detail_rows, detail_title
from gpuroom.tui.room.detail_screen import DetailScreen
from gpuroom.tui.sanitize import sanitize_line
from gpuroom.tui.snapshot import Job

Fetch = Callable[[], Awaitable[Job]]


class JobDetailScreen(DetailScreen):
    """One job of one host, fetched from the box; esc, i or q closes."""

    def __init__(self, host: str, job_id: str, fetch: Fetch, clock: Callable[[], float],
                 lineage: str = "") -> None:
        """``lineage``: the host's move text for the job (HostState.moves), as `i` shows it."""
        super().__init__(f"job {host}/{sanitize_line(job_id)}",
                         [("state", f"asking {host} (queue show)…")])
        self.host = host
        self.job_id = job_id
        self._fetch = fetch
        self._clock = clock
        self._lineage = lineage
        self.answered = False  # the box's answer (or its failure) is on screen

    def on_mount(self) -> None:
        self._load()

    @work(exclusive=True, group="jobdetail")
    async def _load(self) -> None:
        try:
            job = await self._fetch()
        except GpuroomError as exc:
            rows: Rows = [("error", f"queue show on {self.host} failed: "
                                    f"{sanitize_line(exc.message)}")]
            if exc.fix:
                rows.append(("fix", sanitize_line(exc.fix)))
        else:
            rows = [("job", f"{self.host}/{detail_title(job).removeprefix('job ')}"),
                    *detail_rows(job, self._clock(), self._lineage)]
        self.answered = True
        self.show_rows(rows)
