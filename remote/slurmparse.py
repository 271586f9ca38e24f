"""Parsers for Slurm's ``squeue`` and ``sacct`` tables and its duration strings (issue 9).

Column positions come from the output itself (squeue's header, sacct's dashed line), not from
an assumed format string, so ``-o``/``--format`` variants parse the same way as the defaults.
Cells are kept as printed (stripped); empty cells are None.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

_TOKEN = re.compile(r"\S+")
_DASHES = re.compile(r"-+")
# Words Slurm prints where a duration would be (time limits, unset fields).
_NO_DURATION = {"UNLIMITED", "INVALID", "NOT_SET", "N/A", "NONE", "PARTITION_LIMIT"}
# The date line ``squeue -l`` (and each block of ``squeue -i``) prints above its header:
# "Tue Nov 24 12:00:07 2026" (ctime's form, the day padded with a space or a zero).
_DATE_LINE = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} +\d{1,2} \d{1,2}:\d{2}:\d{2} \d{4}$")

Row = Dict[str, Optional[str]]


def _spans(line: str) -> List[Tuple[int, int, str]]:
    return [(m.start(), m.end(), m.group()) for m in _TOKEN.finditer(line)]


def _assign(columns: List[Tuple[int, int, str]], line: str) -> List[Optional[str]]:
    """Give each token of a row to the first column whose header ends at or after it.

    squeue right-aligns ``%.N`` fields (all of its default format but the last) under
    right-aligned headers, so a value never ends past its header's end; the last column
    (``%R``, left-aligned) takes whatever is further right. Tokens given to one column are
    joined with single spaces: a name "my job" or a reason "(ReqNodeNotAvail, UNAVAILABLE)".
    """
    cells: List[List[str]] = [[] for _ in columns]
    for _, end, text in _spans(line):
        index = len(columns) - 1
        for i, (_, col_end, _) in enumerate(columns[:-1]):
            if end <= col_end:
                index = i
                break
        cells[index].append(text)
    return [" ".join(c) if c else None for c in cells]


def parse_squeue(text: str) -> List[Row]:
    """``squeue`` output (default or ``-o`` format with a header) -> one dict per job.

    Keys are the header words as printed (JOBID, PARTITION, NAME, ST, NODELIST(REASON), ...).
    The date line of ``squeue -l`` / ``-i`` is not a header, and a header repeated by ``-i``
    is not a job. A row with exactly one token per column is split on whitespace; otherwise
    tokens go to the column they sit under (see ``_assign``), so a multi-word reason or name
    stays put.
    """
    lines = [ln for ln in text.splitlines()
             if ln.strip() and not _DATE_LINE.match(ln.strip())]
    if not lines:
        return []
    columns = _spans(lines[0])
    names = [name for _, _, name in columns]
    rows: List[Row] = []
    for line in lines[1:]:
        tokens = line.split()
        if tokens == names:
            continue
        cells: List[Optional[str]]
        if len(tokens) == len(columns):
            cells = list(tokens)
        else:
            cells = _assign(columns, line)
        # Both branches give one cell per column (zip(strict=) is not in Python 3.8).
        rows.append({name: cells[i] for i, name in enumerate(names)})
    return rows


def split_job_id(job_id: str) -> Tuple[str, Optional[str]]:
    """"123.batch" -> ("123", "batch"); "123_4" (array task) -> ("123_4", None)."""
    job, _, step = job_id.partition(".")
    return job, (step or None)


def _parsable(lines: List[str]) -> List[Row]:
    # sacct -p / -P: "|"-separated with a trailing "|" under -p.
    names = lines[0].rstrip("|").split("|")
    rows: List[Row] = []
    for line in lines[1:]:
        values = line.rstrip("\n").split("|")[: len(names)]
        values += [""] * (len(names) - len(values))
        rows.append({name: (values[i].strip() or None) for i, name in enumerate(names)})
    return rows


def parse_sacct(text: str) -> List[Row]:
    """``sacct`` output -> one dict per job or step row.

    Column bounds are the runs of the dashed line under the header (``JobName%30`` widens its
    run), so empty cells and trailing spaces cannot shift a value into the next column. When
    a JobID column is present each row also gets ``job_id`` and ``step`` (None on the job's
    own row, "batch", "extern", "0", ... on step rows).
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return []
    if "|" in lines[0]:
        rows = _parsable(lines)
    else:
        if len(lines) < 2 or set(lines[1].replace(" ", "")) != {"-"}:
            raise ValueError(f"sacct output without its dashed separator line: {lines[:2]!r}")
        bounds = [(m.start(), m.end()) for m in _DASHES.finditer(lines[1])]
        names = [lines[0][s:e].strip() for s, e in bounds]
        rows = []
        for line in lines[2:]:
            rows.append({name: (line[bounds[i][0]:bounds[i][1]].strip() or None)
                         for i, name in enumerate(names)})
    for row in rows:
        job_id = row.get("JobID")
        if job_id is not None:
            row["job_id"], row["step"] = split_job_id(job_id)
    return rows


def parse_slurm_duration(text: str) -> Optional[float]:
    """A Slurm duration -> seconds; None for UNLIMITED, INVALID and anything unreadable.

    Forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S; sacct's CPU times add fractional seconds
    ("00:00.004"). Whole results come back as int.
    """
    s = text.strip()
    if not s or s.upper() in _NO_DURATION:
        return None
    days_text, has_days, s = s.rpartition("-")
    parts = s.split(":")
    if has_days:
        # After "D-" the fields are hours first: D-H, D-H:M, D-H:M:S.
        if len(parts) > 3:
            return None
        fields = [days_text, *parts, "0", "0"][:4]
    elif len(parts) == 1:
        fields = ["0", "0", parts[0], "0"]  # a bare number is minutes
    elif len(parts) <= 3:
        fields = ["0", *(["0"] * (3 - len(parts))), *parts]
    else:
        return None
    try:
        days, hours, minutes = (int(f) for f in fields[:3])
        seconds = float(fields[3]) if fields[3].replace(".", "", 1).isdigit() else -1.0
    except ValueError:
        return None
    if min(days, hours, minutes, seconds) < 0:
        return None
    total = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    return int(total) if total == int(total) else total
