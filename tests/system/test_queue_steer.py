"""Queue control on the box (issue 20 item 2): slots, --after, pause/resume, remove, priority,
move, edit and retry-on-exit, through the real helper CLI and real runner processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.queuebox import Box, queue_box, wait_until


@pytest.fixture
def box(tmp_path: Path) -> Iterator[Box]:
    yield from queue_box(tmp_path)


def two_gpus(tmp_path: Path, box: Box) -> dict[str, str]:
    inventory = tmp_path / "gpus.json"
    inventory.write_text(json.dumps({"gpus": [{"index": 0, "processes": []},
                                              {"index": 1, "processes": []}]}))
    return dict(box.env, GPUROOM_GPUS_JSON=str(inventory))


def test_default_slots_are_one_per_gpu(box: Box, tmp_path: Path) -> None:
    env = two_gpus(tmp_path, box)
    # Each job waits until both run: with one slot the first would wait forever (bounded).
    show = ("echo $CUDA_VISIBLE_DEVICES > $GPUROOM_JOB_ID.cuda; i=0; "
            "while [ $(ls *.cuda | wc -l) -lt 2 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); "
            "done; [ $(ls *.cuda | wc -l) -ge 2 ]")
    first = box.add("sh", "-c", show, env=env)
    second = box.add("sh", "-c", show, env=env)
    box.wait_state(first, ("succeeded",), 30)
    box.wait_state(second, ("succeeded",), 30)
    cuda = {(box.work / f"{j}.cuda").read_text().strip() for j in (first, second)}
    assert cuda == {"0", "1"}


def test_configured_slots_and_settings_are_folded(box: Box) -> None:
    box.json("config", "--slots", "3", "--idle-exit", "7", "--kill-grace", "4")
    config = box.ls()["config"]
    assert (config["slots"], config["idle_exit_s"], config["kill_grace_s"]) == (3, 7.0, 4.0)


def test_after_holds_until_the_dependency_succeeds(box: Box) -> None:
    gate = box.work / "gate"
    first = box.add("sh", "-c", f"while [ ! -e {gate} ]; do sleep 0.1; done", opts=("--gpus", "0"))
    box.json("config", "--slots", "2")
    second = box.add("touch", "second.ran", opts=("--gpus", "0", "--after", first))
    box.wait_state(first, ("running",))
    waiting = wait_until(lambda: box.job(second)["waiting"], 10, "a wait reason")
    assert waiting == f"waiting for {first} (dependency)"
    assert box.job(second)["state"] == "queued" and box.job(second)["after"] == [first]
    gate.touch()
    box.wait_state(second, ("succeeded",))
    assert (box.work / "second.ran").exists()


def test_a_failed_dependency_fails_its_dependents_with_that_reason(box: Box) -> None:
    first = box.add("sh", "-c", "sleep 0.5; exit 4", opts=("--gpus", "0"))
    second = box.add("touch", "never", opts=("--gpus", "0", "--after", first))
    third = box.add("touch", "never", opts=("--gpus", "0", "--after", second))
    assert box.wait_state(second, ("failed",))["reason"] == f"dependency {first} failed"
    assert box.wait_state(third, ("failed",))["reason"] == f"dependency {second} failed"
    assert not (box.work / "never").exists()


def test_after_an_unknown_job_is_refused(box: Box) -> None:
    proc = box.run("add", "--after", "j99", "--", "true", check=False)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and not doc["ok"] and "j99" in doc["error"]
    assert box.ls()["jobs"] == []


def test_pause_starts_nothing_new_and_resume_goes_on(box: Box) -> None:
    box.json("config", "--idle-exit", "0.5")
    box.json("pause")
    job = box.add("touch", "ran", opts=("--gpus", "0"))
    assert wait_until(lambda: box.job(job)["waiting"], 10, "a wait reason").startswith("paused")
    assert box.job(job)["state"] == "queued" and box.ls()["config"]["paused"] is True
    # A paused queue's waiting job is no work: its runner leaves when idle, and the job
    # still says it waits because the queue is paused (not for a runner).
    wait_until(lambda: not box.ls()["runner"]["alive"], 15, "the idle runner to leave")
    assert box.job(job)["waiting"].startswith("paused") and not (box.work / "ran").exists()
    doc = box.json("resume")
    assert doc["ok"] and doc["paused"] is False and doc["runner"]["running"]
    box.wait_state(job, ("succeeded",))


def test_remove_takes_a_queued_job_and_refuses_a_running_one(box: Box) -> None:
    running = box.add("sleep", "30", opts=("--gpus", "0"))
    queued = box.add("touch", "never", opts=("--gpus", "0"))
    box.wait_state(running, ("running",))
    doc = box.json("remove", queued)
    assert doc["result"] == "removed"
    refused = box.run("remove", running, check=False)
    assert refused.returncode == 1 and "kill it first" in refused.stdout.decode()
    assert box.job(running)["state"] == "running" and box.job(queued)["state"] == "removed"
    box.run("kill", running, "--grace", "1")


def test_priority_and_move_order_the_queued_jobs(box: Box) -> None:
    box.json("pause")
    low = box.add("true", opts=("--gpus", "0", "--no-start"))
    mid = box.add("true", opts=("--gpus", "0", "--no-start"))
    high = box.add("true", opts=("--gpus", "0", "--no-start", "--priority", "5"))
    assert box.ls()["order"] == [high, low, mid]
    assert box.job(high)["priority"] == 5
    box.json("move", mid, "0")
    assert box.ls()["order"] == [mid, high, low]
    box.json("resume")
    for job in (low, mid, high):
        box.wait_state(job, ("succeeded",))
    starts = {j: box.job(j)["attempts"][0]["start"] for j in (low, mid, high)}
    assert starts[mid] < starts[high] < starts[low]


def test_edit_adds_a_changed_copy_and_keeps_the_old_job(box: Box) -> None:
    old = box.add("sh", "-c", "echo $WHO > old.txt", opts=("--gpus", "0", "--env", "WHO=a",
                                                           "--env", "DROP=1"))
    box.wait_state(old, ("succeeded",))
    doc = box.json("edit", old, "--env", "WHO=b", "--unset-env", "DROP", "--",
                   "sh", "-c", "echo $WHO $DROP > new.txt")
    new = doc["job"]
    assert doc["ok"] and doc["edited_from"] == old and new != old
    job = box.wait_state(new, ("succeeded",))
    assert job["edited_from"] == old and job["env"] == {"WHO": "<redacted>"} and job["gpus"] == 0
    assert (box.work / "new.txt").read_text() == "b\n"
    assert box.job(old)["state"] == "succeeded" and len(box.job(old)["attempts"]) == 1


def test_retry_on_exit_retries_a_non_zero_exit(box: Box) -> None:
    count = box.work / "count"
    script = f"echo x >> {count}; exit 5"
    job = box.add("sh", "-c", script, opts=("--gpus", "0", "--retries", "2", "--retry-on-exit"))
    wait_until(lambda: len(box.job(job)["attempts"]) == 3
               and box.job(job)["state"] == "failed", 20, "three attempts")
    assert count.read_text().count("x") == 3


def test_show_gives_one_job_with_its_newest_checkpoint(box: Box) -> None:
    job = box.add("sh", "-c", 'echo w > "$GPUROOM_CKPT_DIR/step_7.pt"', opts=("--gpus", "0"))
    box.wait_state(job, ("succeeded",))
    doc = box.json("show", job)
    [shown] = doc["jobs"]
    assert doc["ok"] and shown["id"] == job
    assert shown["checkpoint"]["path"].endswith("step_7.pt") and shown["checkpoint"]["size"] == 2
    missing = box.run("show", "j42", check=False)
    assert missing.returncode == 1 and "no job j42" in missing.stdout.decode()


def test_after_and_priority_are_refused_on_a_slurm_queue_not_dropped(box: Box) -> None:
    proc = box.run("add", "--backend", "slurm", "--after", "j1", "--", "true", check=False)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 1 and not doc["ok"] and "Slurm does not read them" in doc["error"]
