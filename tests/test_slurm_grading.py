"""Grading on a real Slurm cluster, as HPC sites grade: a one-node cluster of this machine (scripts/slurm_local.sh,
its own munge key, ports and spool in a folder of the test's), deploy/slurm/grade.sbatch submitted as a job array
for a class of 14, the shards merged with `zerolab grade merge` and compared with the single-machine grading of the
same notebooks (tests/submissions/graded.py, the corpus run).

What a scheduler brings is tried too: a task cancelled while it grades, and one killed at its time limit, are named
by the merge with their Slurm job (never merged as zeros), and the task submitted again into the same folder
replaces its shard. Jobs run as the submitting user, root here, so grading has the full sandbox (bubblewrap)."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.submissions import corpus
from tests.submissions.graded import REPO, gradebook_scores, normalised_rows, read_rows, zerolab

pytestmark = pytest.mark.slow
SHARDS = 3
CLASS = (*corpus.CORRECT, *corpus.FILE_CASES, "sys_exit", "deleted_test_cell", "flipped_grade_flag",
         "shadowed_builtin", "rigged_eq_dict")
SCRIPT = REPO / "scripts" / "slurm_local.sh"


def _why_not():
    if os.geteuid() != 0:
        return "slurmd starts jobs as the submitting user, which needs root"
    if not shutil.which("slurmctld") and not shutil.which("apt-get"):
        return "slurm-wlm is not installed and there is no apt-get to install it (bash scripts/setup.sh --grading)"
    return None


@pytest.fixture(scope="module")
def cluster():
    if _why_not():
        pytest.skip(_why_not())
    state = Path(tempfile.mkdtemp(prefix="zerolab-slurm-"))  # its own cluster: never the checkout's .slurm/
    # 4 slots on 2 cores: the task frozen until its time limit (below) holds a slot but no core, beside the array
    env = dict(os.environ, ZEROLAB_SLURM_DIR=str(state), ZEROLAB_SLURM_CPUS="4")
    started = subprocess.run(["bash", SCRIPT, "start"], env=env, capture_output=True, text=True, timeout=600)
    if started.returncode != 0:  # stop what did start (munged, slurmctld): no daemon outlives the test
        subprocess.run(["bash", SCRIPT, "stop"], env=env, capture_output=True, timeout=120)
    assert started.returncode == 0, started.stdout + started.stderr
    env["SLURM_CONF"] = str(state / "slurm.conf")
    yield env
    subprocess.run(["bash", SCRIPT, "stop"], env=env, capture_output=True, timeout=120)
    shutil.rmtree(state, ignore_errors=True)


def sbatch(env, course, *options, wait=True):
    """Submit deploy/slurm/grade.sbatch for this course; the job id (after the job ended, with wait)."""
    exports = ",".join(["ALL", f"LESSON={corpus.LESSON}", f"COURSE={course}", f"RESULTS={course.parent / 'shards'}",
                        f"SHARDS={SHARDS}", "JOBS=1", f"ZEROLAB={sys.executable} -m zerolab"])
    command = ["sbatch", "--parsable", f"--export={exports}", "--cpus-per-task=1", "--mem=4G",
               f"--output={course.parent}/slurm-%A_%a.log", *options, *(["--wait"] if wait else []),
               str(REPO / "deploy" / "slurm" / "grade.sbatch")]
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert wait or done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().split(";")[0], done


def shard_folder(course, number):
    return course.parent / "shards" / f"{corpus.LESSON}-{number}-of-{SHARDS}"


@pytest.fixture(scope="module")
def class_course(graded_corpus, tmp_path_factory):
    course = tmp_path_factory.mktemp("slurm-class") / "course"
    corpus.write_course(course, REPO)
    for student in CLASS:
        shutil.copytree(graded_corpus.course / "submitted" / student, course / "submitted" / student)
    return course


@pytest.fixture(scope="module")
def stalled_job(cluster, class_course):
    """A one-task array with a one-minute limit whose grading is frozen once it has begun (tests/slurm_stall.sh),
    submitted first so that its minute passes while the class is graded."""
    course = class_course.parent / "timeout-course"
    shutil.copytree(class_course, course)
    results = course.parent / "timeout-shards"
    stall = REPO / "tests" / "slurm_stall.sh"
    exports = ",".join(["ALL", f"LESSON={corpus.LESSON}", f"COURSE={course}", f"RESULTS={results}", "SHARDS=1",
                        f"ZEROLAB={stall} {sys.executable} -m zerolab"])
    done = subprocess.run(["sbatch", "--parsable", "--array=1", "--time=1", f"--export={exports}",
                           "--cpus-per-task=1", "--mem=2G", f"--output={course.parent}/timeout-%A_%a.log",
                           str(REPO / "deploy" / "slurm" / "grade.sbatch")],
                          env=cluster, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip().split(";")[0], course, results


@pytest.fixture(scope="module")
def array_run(cluster, class_course, stalled_job):
    started = time.monotonic()
    job, done = sbatch(cluster, class_course, f"--array=1-{SHARDS}")
    seconds = time.monotonic() - started
    logs = "\n".join(path.read_text() for path in sorted(class_course.parent.glob(f"slurm-{job}_*.log")))
    return job, done, logs, seconds


def test_the_array_grades_the_class_and_the_merge_equals_single_machine_grading(array_run, class_course,
                                                                                  graded_corpus):
    job, done, logs, seconds = array_run
    # a task's status is zerolab grade's: 1 where a student's notebook could not be graded (invalid_json here)
    assert logs.count("done in ") == SHARDS, done.stdout + done.stderr + logs
    folders = [shard_folder(class_course, number) for number in range(1, SHARDS + 1)]
    merged = zerolab("grade", "merge", corpus.LESSON, *folders, "--course", class_course)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert f"{SHARDS} shard(s) of {SHARDS}, {len(CLASS)} students" in merged.stdout, merged.stdout
    rows = normalised_rows(read_rows(class_course), class_course)
    single = normalised_rows({student: graded_corpus.rows[student] for student in CLASS}, graded_corpus.course)
    assert rows == single
    assert gradebook_scores(class_course) == {student: score for student, score in graded_corpus.scores.items()
                                              if student in CLASS}
    print(f"Slurm array of {SHARDS} over {len(CLASS)} students: {seconds:.0f} s from sbatch to the last task's end")


def test_a_task_cancelled_while_grading_is_named_and_its_resubmission_replaces_the_shard(cluster, class_course,
                                                                                        array_run, graded_corpus):
    course = class_course
    folder = shard_folder(course, 2)
    shutil.rmtree(folder)
    job, _ = sbatch(cluster, course, "--array=2", wait=False)
    record = folder / "zerolab-shard.json"
    deadline = time.monotonic() + 300
    while not record.exists() and time.monotonic() < deadline:  # the task has started grading
        time.sleep(0.5)
    assert record.exists(), "the resubmitted task never started"
    cancelled = subprocess.run(["scancel", f"{job}_2"], env=cluster, capture_output=True, text=True)
    assert cancelled.returncode == 0, cancelled.stderr
    _wait_until_gone(cluster, job)
    folders = [shard_folder(course, number) for number in range(1, SHARDS + 1)]
    merged = zerolab("grade", "merge", corpus.LESSON, *folders, "--course", course)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert f"NOT FINISHED: {folder} (shard 2/{SHARDS})" in merged.stdout, merged.stdout
    assert f"Slurm job {job}_2" in merged.stdout and f"sacct -j {job}_2" in merged.stdout, merged.stdout
    print(merged.stdout)

    again, done = sbatch(cluster, course, "--array=2")  # into the same folder
    assert done.returncode == 0, done.stdout + done.stderr
    merged = zerolab("grade", "merge", corpus.LESSON, *folders, "--course", course)
    assert merged.returncode == 0 and "NOT FINISHED" not in merged.stdout, merged.stdout + merged.stderr
    assert gradebook_scores(course) == {student: score for student, score in graded_corpus.scores.items()
                                        if student in CLASS}


def test_a_task_killed_at_its_time_limit_is_named_not_merged_as_zeros(cluster, stalled_job, array_run):
    job, course, results = stalled_job
    _wait_until_gone(cluster, job, timeout=300)
    log = (course.parent / f"timeout-{job}_1.log").read_text()
    assert "DUE TO TIME LIMIT" in log, log
    merged = zerolab("grade", "merge", corpus.LESSON, results / f"{corpus.LESSON}-1-of-1", "--course", course)
    assert merged.returncode == 1, merged.stdout + merged.stderr
    assert "NOT FINISHED" in merged.stdout and f"Slurm job {job}_1" in merged.stdout, merged.stdout
    assert " 0 merged" in merged.stdout, merged.stdout
    assert not (course / "grades.csv").exists() or not read_rows(course), "a student of the killed shard was merged"
    print(merged.stdout)


def _wait_until_gone(env, job, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queue = subprocess.run(["squeue", "-h", "-j", str(job)], env=env, capture_output=True, text=True)
        if not queue.stdout.strip():
            return
        time.sleep(0.5)
    raise AssertionError(f"job {job} still in the queue after {timeout} s")
