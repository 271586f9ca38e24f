"""One line about a Slurm job for the queue table and the room (issue 9), and why a pending
job waits, in words (issue 23). Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuroom.tui.present.format import fmt_duration, fmt_hhmm, fmt_mmss
from gpuroom.tui.sanitize import sanitize_line, truncate_display
from gpuroom.tui.snapshot import ArrayTask, Job

REASON_MAX_CHARS = 60  # Slurm's reason is the box's text: one bounded word or two


@dataclass(frozen=True)
class WaitReason:
    """Slurm's pending reason code, what it means and what the user can do about it."""

    code: str
    meaning: str
    action: str
    stuck: bool = False  # it never starts unless the user (or an admin) changes something


def _r(meaning: str, action: str, stuck: bool = False) -> tuple[str, str, bool]:
    return meaning, action, stuck


# squeue(1) "JOB REASON CODES", the ones a training job meets. Keyed by the code as squeue
# prints it before any ", detail" or ":node" suffix.
PENDING_REASONS: dict[str, tuple[str, str, bool]] = {
    "Resources": _r("the nodes, GPUs or memory it asked for are all in use",
                    "nothing: it starts when they free; fewer GPUs or a shorter --time can "
                    "let the backfill scheduler start it sooner"),
    "Priority": _r("jobs of higher priority are ahead of it in the queue",
                   "wait; a shorter --time lets backfill slot it into a gap (sprio -j ID "
                   "shows why others rank higher)"),
    "Dependency": _r("it waits for a job it depends on (--dependency) to finish",
                     "nothing: it starts when the dependency is met (scontrol show job ID)"),
    "DependencyNeverSatisfied": _r(
        "the job it depends on ended in a way that can never satisfy the dependency",
        "it will never start: scancel it and resubmit without that dependency", True),
    "BeginTime": _r("its start time has not come (--begin, or a requeued job's short hold)",
                    "nothing: it starts at its begin time"),
    "QOSMaxGRESPerUser": _r("you already use as many GPUs as your QOS allows one user",
                            "wait for your other jobs to end, or scancel one of them"),
    "QOSMaxJobsPerUserLimit": _r("you already run as many jobs as your QOS allows",
                                 "wait for your other jobs to end, or scancel one"),
    "QOSMaxCpuPerUserLimit": _r("you already use as many CPUs as your QOS allows",
                                "wait for your other jobs to end, or ask for fewer CPUs"),
    "QOSGrpGRES": _r("the GPUs of your QOS as a whole are in use",
                     "wait, or submit with another --qos"),
    "AssocGrpGRES": _r("your account's group already uses all the GPUs it may",
                       "wait for your group's jobs to end, or ask for fewer GPUs"),
    "AssocGrpGRESMinutes": _r("your account has spent its GPU-minutes allowance",
                              "ask your allocation manager for more hours", True),
    "AssocGrpCPUMinutesLimit": _r("your account has spent its CPU-minutes allowance",
                                  "ask your allocation manager for more hours", True),
    "AssocMaxJobsLimit": _r("your account runs as many jobs as it may",
                            "wait for your other jobs to end"),
    "ReqNodeNotAvail": _r("a node it needs is down, drained or held for a reservation "
                          "(maintenance)",
                          "check sinfo; drop --nodelist/--exclude pins; before maintenance a "
                          "shorter --time can fit before the reservation starts"),
    "PartitionTimeLimit": _r("its --time is longer than the partition allows",
                             "it will never start: scancel and resubmit with a shorter "
                             "--time, or pick another partition", True),
    "PartitionNodeLimit": _r("it asks for more nodes than the partition allows",
                             "it will never start: scancel and resubmit with fewer nodes",
                             True),
    "PartitionDown": _r("its partition is down",
                        "wait for the admins, or resubmit to another partition"),
    "PartitionInactive": _r("its partition is inactive",
                            "resubmit to another partition", True),
    "Reservation": _r("it waits for its advanced reservation to start",
                      "nothing: it starts with the reservation"),
    "JobHeldUser": _r("you put it on hold", "scontrol release ID", True),
    "JobHeldAdmin": _r("an administrator put it on hold", "ask the cluster's admins", True),
    "launch failed requeued held": _r(
        "its launch failed on the node, so Slurm requeued and held it",
        "look at the node (sinfo -R), then scontrol release ID", True),
    "InvalidAccount": _r("its --account is not one you may use",
                         "scancel and resubmit with a valid --account", True),
    "InvalidQOS": _r("its --qos is not one you may use",
                     "scancel and resubmit with a valid --qos", True),
    "BadConstraints": _r("no node has the features (--constraint) it asks for",
                         "scancel and resubmit with constraints a node has", True),
    "Licenses": _r("it waits for a license (--licenses) to free",
                   "nothing: it starts when the license frees"),
    "NodeDown": _r("a node it needs is down", "wait for the admins, or resubmit elsewhere"),
    "Cleaning": _r("a requeued job waits while its previous run is cleaned up",
                   "nothing: it is queued again in a moment"),
    "None": _r("the scheduler has not looked at it yet", "nothing: wait a scheduler cycle"),
}
_CODE_RE = re.compile(r"^[(]?([A-Za-z][A-Za-z ]*?)(?:[,:)]|$)")


def wait_reason(reason: str | None) -> WaitReason | None:
    """The code of squeue's reason ("ReqNodeNotAvail, UNAVAILABLE:node1", "(Priority)") with
    its meaning and what to do; an unknown code says where its meaning is. None: no reason."""
    if not reason or not reason.strip():
        return None
    text = reason.strip()
    found = PENDING_REASONS.get(text)
    if found is not None:
        return WaitReason(text, *found)
    m = _CODE_RE.match(text)
    code = m.group(1).strip() if m else text
    found = PENDING_REASONS.get(code)
    if found is not None:
        return WaitReason(code, *found)
    code = truncate_display(sanitize_line(code), REASON_MAX_CHARS)
    return WaitReason(code, "a reason gpuroom has no words for",
                      "see JOB REASON CODES in man squeue, or scontrol show job ID")


def expected_start_text(job: Job, now: float) -> str:
    """"expected to start 12:30 (in 14m)" from squeue's %S, or "" when Slurm has none."""
    start = job.expected_start
    if start is None:
        return ""
    when = fmt_hhmm(start)
    if start <= now:
        return f"expected to start {when} (due now)"
    return f"expected to start {when} (in {fmt_duration(start - now)})"


def slurm_summary(job: Job) -> str:
    """'123 RUNNING vm 0:41 left' / '123 PENDING (BeginTime) requeued x1'; '' for a box job."""
    if not job.slurm_id:
        return ""
    parts = [job.slurm_id, job.slurm_state or "?"]
    if job.reason:
        parts.append(f"({job.reason})")
    if job.state == "queued" and job.expected_start is not None:
        parts.append("starts " + fmt_hhmm(job.expected_start))
    if job.node and job.state == "running":
        parts.append(job.node)
    if job.time_left_s is not None:
        parts.append(f"{fmt_mmss(job.time_left_s)} left")
    if job.restarts:
        parts.append(f"requeued x{job.restarts}")
    if job.array:
        parts.append(f"array {job.array}:")
        counts: dict[str, int] = {}
        for t in job.tasks:
            counts[t.state or "?"] = counts.get(t.state or "?", 0) + 1
        parts.append(", ".join(f"{n} {state}" for state, n in counts.items()) or "no task yet")
    return sanitize_line(" ".join(parts))  # the reason and node are Slurm's text, from the box


def task_summary(task: ArrayTask) -> str:
    """'123_4 RUNNING vm' / '123_5 PENDING (JobArrayTaskLimit)' for an array task's row."""
    parts = [task.slurm_id or "?", task.slurm_state or "?"]
    if task.reason:
        parts.append(f"({task.reason})")
    if task.node and task.state == "running":
        parts.append(task.node)
    return sanitize_line(" ".join(parts))


def queue_backend(profile: str | None) -> str:
    """The queue backend for a host's profile: ``slurm`` on a login node, else ``local``."""
    return "slurm" if profile == "slurm" else "local"
