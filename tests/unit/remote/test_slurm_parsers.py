"""squeue / sacct / duration parsers (remote/slurmparse.py) on every capture in fixtures/slurm."""

from __future__ import annotations

import pytest
from paths import FIXTURES

from gpuroom.remote.slurmparse import (
    parse_sacct,
    parse_slurm_duration,
    parse_squeue,
    split_job_id,
)

SLURM = FIXTURES / "slurm"


def capture(name: str) -> str:
    """The verbatim output below a fixture's '---' header line."""
    return (SLURM / name).read_text(encoding="utf-8").split("\n---\n", 1)[1]


SQUEUE_EXPECTED = {
    "squeue-default-stampede3-pd-priority.txt": [
        {"JOBID": "1872107", "PARTITION": "skx", "NAME": "run_01_u", "USER": "tg851601",
         "ST": "PD", "TIME": "0:00", "NODES": "1", "NODELIST(REASON)": "(Priority)"},
    ],
    "squeue-o-format-stampede3-pending.txt": [
        {"JOBID": "1854938", "STATE": "PENDING", "SUBMIT_TIME": "2025-05-01T14:09:55",
         "TIME": "0:00"},
    ],
}


def _soperator(job_id: str, max_rss: str | None, max_vm: str | None,
               state: str) -> dict[str, str | None]:
    job, step = split_job_id(job_id)
    return {"JobID": job_id, "JobName": "sleep", "AllocCPUS": "2", "MaxRSS": max_rss,
            "MaxVMSize": max_vm, "TotalCPU": "00:00.004", "State": state,
            "job_id": job, "step": step}


SACCT_EXPECTED = {
    # Every line ends in a space; the job rows have empty MaxRSS/MaxVMSize cells.
    "sacct-format-soperator-trailing-space.txt": [
        _soperator("19.0", "6040K", "0", "COMPLETED"),
        _soperator("20", None, None, "FAILED"),
        _soperator("20.0", "5872K", "0", "FAILED"),
        _soperator("21", None, None, "FAILED"),
        _soperator("21.0", "5868K", "0", "FAILED"),
        _soperator("22", None, None, "COMPLETED"),
        _soperator("22.0", "6036K", "0", "COMPLETED"),
    ],
    "sacct-format-stampede3-pending.txt": [
        {"NNodes": "1", "Timelimit": "00:06:00", "Elapsed": "00:00:00",
         "JobName": "run_02_unpack_secondary_slc_0", "State": "PENDING"},
    ],
    # No JobID column requested: no job_id/step keys; the job row's MaxRSS is blank.
    "sacct-o-reqmem-maxrss-steps.txt": [
        {"ReqMem": "10000Mn", "MaxRSS": None},
        {"ReqMem": "10000Mn", "MaxRSS": "0"},
        {"ReqMem": "10000Mn", "MaxRSS": "412420K"},
    ],
}


def test_every_slurm_capture_has_expectations() -> None:
    assert sorted(p.name for p in SLURM.iterdir()) == sorted({**SQUEUE_EXPECTED,
                                                              **SACCT_EXPECTED})


@pytest.mark.parametrize("name", sorted(SQUEUE_EXPECTED))
def test_parse_squeue_capture(name: str) -> None:
    assert parse_squeue(capture(name)) == SQUEUE_EXPECTED[name]


@pytest.mark.parametrize("name", sorted(SACCT_EXPECTED))
def test_parse_sacct_capture(name: str) -> None:
    assert parse_sacct(capture(name)) == SACCT_EXPECTED[name]


def test_sacct_step_rows_belong_to_their_job() -> None:
    rows = parse_sacct(capture("sacct-format-soperator-trailing-space.txt"))
    jobs = {r["job_id"]: r["State"] for r in rows if r["step"] is None}
    steps = [(r["job_id"], r["step"]) for r in rows if r["step"] is not None]
    assert jobs == {"20": "FAILED", "21": "FAILED", "22": "COMPLETED"}
    # 19.0's job row is not in the capture: a step may arrive without its job.
    assert steps == [("19", "0"), ("20", "0"), ("21", "0"), ("22", "0")]


def test_sacct_durations_from_captures() -> None:
    (row,) = parse_sacct(capture("sacct-format-stampede3-pending.txt"))
    assert (parse_slurm_duration(row["Timelimit"] or ""),
            parse_slurm_duration(row["Elapsed"] or "")) == (360, 0)
    cpu = parse_sacct(capture("sacct-format-soperator-trailing-space.txt"))[0]["TotalCPU"]
    assert parse_slurm_duration(cpu or "") == pytest.approx(0.004)


def test_squeue_time_from_captures() -> None:
    for name in SQUEUE_EXPECTED:
        (row,) = parse_squeue(capture(name))
        assert parse_slurm_duration(row["TIME"] or "") == 0


def test_squeue_multi_word_cells_stay_in_their_column() -> None:
    # Built with squeue's default format "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R".
    header = (f"{'JOBID':>18} {'PARTITION':>9} {'NAME':>8} {'USER':>8} {'ST':>2} "
              f"{'TIME':>10} {'NODES':>6} NODELIST(REASON)")
    pending = (f"{'123':>18} {'gpu':>9} {'my job':>8} {'alice':>8} {'PD':>2} {'0:00':>10} "
               f"{'1':>6} (ReqNodeNotAvail, UNAVAILABLE)")
    running = (f"{'124_7':>18} {'gpu':>9} {'train':>8} {'alice':>8} {'R':>2} "
               f"{'1-02:03:04':>10} {'2':>6} node[01-02]")
    pending_row, running_row = parse_squeue("\n".join([header, pending, running]))
    assert (pending_row["NAME"], pending_row["NODELIST(REASON)"]) == (
        "my job", "(ReqNodeNotAvail, UNAVAILABLE)")
    assert (running_row["JOBID"], running_row["ST"], running_row["NODELIST(REASON)"]) == (
        "124_7", "R", "node[01-02]")
    assert parse_slurm_duration(running_row["TIME"] or "") == 93784


def test_sacct_parsable_output() -> None:
    text = "JobID|JobName|State|\n123|train|RUNNING|\n123.batch|batch|RUNNING|\n"
    assert [(r["job_id"], r["step"], r["State"]) for r in parse_sacct(text)] == [
        ("123", None, "RUNNING"), ("123", "batch", "RUNNING")]


def test_sacct_without_separator_line_is_refused() -> None:
    with pytest.raises(ValueError):
        parse_sacct("JobID State\n123 RUNNING\n")


def test_empty_output_is_no_rows() -> None:
    assert parse_squeue("") == [] and parse_sacct("\n") == []


@pytest.mark.parametrize(("text", "seconds"), [
    ("1-02:03:04", 93784),      # D-HH:MM:SS
    ("2-03:04", 183840),        # D-HH:MM
    ("2-03", 183600),           # D-HH
    ("1:02:03", 3723),          # HH:MM:SS
    ("05:30", 330),             # MM:SS
    ("0:00", 0),
    ("30", 1800),               # a bare number is minutes
    ("00:00.004", 0.004),       # sacct CPU times carry milliseconds
    ("1-02:03:04.5", 93784.5),
    ("UNLIMITED", None),
    ("INVALID", None),
    ("Partition_Limit", None),
    ("", None),
    ("1-", None),
    ("1:2:3:4", None),
    ("1.5", None),
    ("-5", None),
    ("a:b", None),
])
def test_parse_slurm_duration(text: str, seconds: float | None) -> None:
    result = parse_slurm_duration(text)
    if seconds is None:
        assert result is None
    else:
        assert result == pytest.approx(seconds)
        assert isinstance(result, int) == (seconds == int(seconds))


def test_split_job_id() -> None:
    assert split_job_id("123.batch") == ("123", "batch")
    assert split_job_id("123_4.extern") == ("123_4", "extern")
    assert split_job_id("123+0") == ("123+0", None)


def test_squeue_long_output_with_its_leading_date_line() -> None:
    # `squeue -l` (and every block of `squeue -i N`) starts with the date; the capture's
    # source had that line and a blank line above the header (see the fixture's note).
    text = "Thu May 08 10:14:03 2025\n\n" + capture("squeue-default-stampede3-pd-priority.txt")
    assert parse_squeue(text) == SQUEUE_EXPECTED["squeue-default-stampede3-pd-priority.txt"]


def test_squeue_long_format_running_and_pending() -> None:
    # squeue -l as Slurm 22.05 prints it ("%.18i %.9P %.8j %.8u %.8T %.10M %.9l %.6D %R").
    lines = [
        "Tue Nov 24 12:00:07 2026",
        f"{'JOBID':>18} {'PARTITION':>9} {'NAME':>8} {'USER':>8} {'STATE':>8} {'TIME':>10} "
        f"{'TIME_LIMI':>9} {'NODES':>6} NODELIST(REASON)",
        f"{'41':>18} {'debug':>9} {'train':>8} {'root':>8} {'RUNNING':>8} {'0:05':>10} "
        f"{'1:00':>9} {'1':>6} node1",
        f"{'42':>18} {'debug':>9} {'wide':>8} {'root':>8} {'PENDING':>8} {'0:00':>10} "
        f"{'UNLIMITED':>9} {'1':>6} (Resources)",
    ]
    rows = parse_squeue("\n".join(lines) + "\n")
    assert [(r["JOBID"], r["STATE"], r["TIME_LIMI"], r["NODELIST(REASON)"]) for r in rows] == [
        ("41", "RUNNING", "1:00", "node1"), ("42", "PENDING", "UNLIMITED", "(Resources)")]
