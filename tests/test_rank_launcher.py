"""The warm rank launcher (zerolab.handmade.core.rank_launcher): the jobs of one process fork their ranks from one warm
launcher, each job with the environment and folder the process had when it started the job, and nothing of a job
outlives it; a dead launcher is replaced, and the launcher ends with the process that started it."""
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from leftovers import ranks_left
from zerolab.handmade.core import harness, rank_launcher

TESTS = Path(__file__).resolve().parent
PROBE = {"kind": "rank_probe:where"}


def test_jobs_fork_their_ranks_from_one_warm_launcher_and_leave_no_rank(fresh_launcher):
    first = harness.run(PROBE, 2, progress=False)
    warm = rank_launcher.warm_pid()
    second = harness.run(PROBE, 3, progress=False)
    assert warm is not None and rank_launcher.warm_pid() == warm
    assert [r["rank"] for r in second] == ["0", "1", "2"]
    for results in (first, second):
        assert {r["launcher_parent"] for r in results} == {warm}, "a job's launcher is not a fork of the warm one"
        assert len({r["launcher"] for r in results}) == 1
    assert first[0]["launcher"] != second[0]["launcher"], "each job has a launcher of its own"
    assert ranks_left() == []


def test_each_job_sees_the_environment_and_folder_of_its_moment(fresh_launcher, tmp_path, monkeypatch):
    monkeypatch.setenv("ZEROLAB_PROBE", "one")
    assert harness.run(PROBE, 2, progress=False)[0]["probe"] == "one"
    monkeypatch.setenv("ZEROLAB_PROBE", "two")
    monkeypatch.chdir(tmp_path)
    results = harness.run(PROBE, 2, progress=False)
    assert {r["probe"] for r in results} == {"two"} and {r["cwd"] for r in results} == {str(tmp_path)}


def test_a_dead_launcher_is_replaced(fresh_launcher):
    harness.run(PROBE, 2, progress=False)
    dead = rank_launcher.warm_pid()
    psutil.Process(dead).kill()
    psutil.Process(dead).wait(10)
    results = harness.run(PROBE, 2, progress=False)
    assert {r["launcher_parent"] for r in results} == {rank_launcher.warm_pid()} != {dead}


def test_the_launcher_ends_with_the_process_that_started_it(tmp_path):
    """A kernel killed with SIGKILL cannot tear anything down: its warm launcher sees its stdin close and ends."""
    script = ("import os, sys, time\nsys.path.insert(0, sys.argv[1])\nfrom zerolab.handmade.core import harness, "
              "rank_launcher\nharness.run({'kind': 'rank_probe:where'}, 2, progress=False)\n"
              "print(rank_launcher.warm_pid(), flush=True)\ntime.sleep(600)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
    kernel = subprocess.Popen([sys.executable, "-c", script, str(TESTS)], stdout=subprocess.PIPE, text=True,
                              env=env, cwd=TESTS.parent)
    warm = int(kernel.stdout.readline())
    assert psutil.pid_exists(warm)
    kernel.kill()
    kernel.wait()
    deadline = time.monotonic() + 20
    while psutil.pid_exists(warm) and psutil.Process(warm).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the warm launcher outlived its kernel"
        time.sleep(0.2)
