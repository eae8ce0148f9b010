"""zerolab.run.run_cache: an identical job runs once; its results and saved files come back for the next; never
while grading, never for a job that reads given files, never for a failed run; two processes, one run."""
import json
import multiprocessing
import os
import time

import pytest

from zerolab.run import run_cache
from zerolab.run.run_cache import through_cache
from zerolab.base.interpreter import run_cache_from_environment

JOB = {"config": {"zero_optimization": {"stage": 2}}, "steps": 2, "device": "cpu"}


def saving_run(calls):
    def run(job, on_event=None):
        calls.append(job)
        if on_event:
            on_event({"event": "step", "rank": 0, "step": 1, "loss": 4.25})
        (job_dir := __import__("pathlib").Path(job["save_dir"]) / "global_step2").mkdir(parents=True)
        (job_dir / "mp_rank_00_model_states.pt").write_bytes(b"weights")
        return [{"rank": rank, "saved_in": job["save_dir"], "loss": 4.25} for rank in range(2)]
    return run


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(run_cache, "CONFIGURED", str(tmp_path / "cache"))  # as read at start-up
    return tmp_path


def test_the_second_identical_job_gets_the_results_and_the_files_without_running(cache):
    calls, seen = [], []
    first = through_cache(dict(JOB, save_dir=str(cache / "a")), 2, "zerolab.ckpt.worker", saving_run(calls),
                          seen.append)
    second = through_cache(dict(JOB, save_dir=str(cache / "b")), 2, "zerolab.ckpt.worker", saving_run(calls),
                           seen.append)
    assert len(calls) == 1
    assert seen == [{"event": "step", "rank": 0, "step": 1, "loss": 4.25}] * 2, "the copy shows the same progress"
    assert [r["saved_in"] for r in second] == [str(cache / "b")] * 2 and second[0]["loss"] == first[0]["loss"]
    assert (cache / "b" / "global_step2" / "mp_rank_00_model_states.pt").read_bytes() == b"weights"


def test_another_job_another_rank_count_or_worker_runs_again(cache):
    calls = []
    for job, ranks, worker in [(JOB, 2, "w"), (dict(JOB, steps=3), 2, "w"), (JOB, 3, "w"), (JOB, 2, "other")]:
        through_cache(dict(job, save_dir=str(cache / f"s{len(calls)}")), ranks, worker, saving_run(calls))
    assert len(calls) == 4


def test_grading_a_given_checkpoint_and_a_failed_run_are_never_cached(cache, monkeypatch):
    calls = []
    for _ in range(2):
        through_cache(dict(JOB, load_dir=str(cache), result_dir="r"), 2, "w",
                      lambda job, on_event: calls.append(job) or [{}])
    assert len(calls) == 2, "a job that loads a checkpoint depends on it"

    def failing(job, on_event):
        calls.append(job)
        raise RuntimeError("rank 1 died")
    for _ in range(2):
        with pytest.raises(RuntimeError):
            through_cache(dict(JOB, steps=9), 2, "w", failing)
    assert len(calls) == 4, "a failure is not stored"

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    monkeypatch.setattr(run_cache, "CONFIGURED", run_cache_from_environment())
    for _ in range(2):
        through_cache(JOB, 2, "w", lambda job, on_event: calls.append(job) or [{}])
    assert len(calls) == 6, "while grading every job runs"


def test_a_cell_that_sets_the_variable_after_start_up_changes_nothing(tmp_path):
    """What a submission could try: point the tests' runs at files of its own. The folder is read at import."""
    import subprocess
    import sys

    probe = ("import os, zerolab\nfrom zerolab.run import run_cache\n"
             f"os.environ['ZEROLAB_RUN_CACHE'] = {str(tmp_path)!r}\nos.environ.pop('NBGRADER_EXECUTION', None)\n"
             "print(run_cache.folder())")
    env = {key: value for key, value in os.environ.items() if key != "ZEROLAB_RUN_CACHE"}
    env["NBGRADER_EXECUTION"] = "autograde"
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "None"


def _slow_run_in_a_process(cache_dir, log):
    run_cache.CONFIGURED = cache_dir  # a fresh process: what ZEROLAB_RUN_CACHE at its start-up would give

    def run(job, on_event):
        with open(log, "a") as handle:
            handle.write("ran\n")
        time.sleep(1.0)
        return [{"rank": 0}]
    through_cache(JOB, 1, "w", run)


def test_two_processes_asking_at_once_run_the_job_once(cache):
    log = cache / "log.txt"
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_slow_run_in_a_process, args=(str(cache / "cache"), str(log)))
                 for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    assert log.read_text() == "ran\n"
    assert json.loads(next((cache / "cache").glob("*/results.json")).read_text()) == [{"rank": 0}]
