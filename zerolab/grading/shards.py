"""Shards: one part of a class graded into a folder of its own, for a scheduler (a Kubernetes Indexed Job, a
Slurm job array) or for several processes on one machine; `zerolab grade merge` folds them back into the course.

Shard K of N holds the students whose id hashes (SHA-256) to K-1 modulo N: the same split on every machine,
whatever order the files are listed in, and a student never moves between shards of the same N.
The shard folder is an nbgrader course of its own: the course's nbgrader_config.py, source/ and release/ of
the lesson, a snapshot of its gradebook.db; grading writes autograded/, feedback/, grades.csv and
zerolab-grading/ there, and RECORD, which says which shard it is, of which lesson, for whom, and whether it ended.
It reads the submissions from the course and writes nothing outside itself.
"""
import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

from zerolab.errors import UserError
from zerolab.grading.coursedir import Course

RECORD = "zerolab-shard.json"


def parse(text):
    """'2/4' -> (2, 4); shards count from 1 (a scheduler's index from 0 is `$((INDEX + 1))`)."""
    parts = str(text).split("/")
    try:
        number, count = int(parts[0]), int(parts[1])
        if len(parts) != 2:
            raise ValueError
    except (ValueError, IndexError):
        raise UserError(f"--shard: {text!r} is not K/N, e.g. --shard 1/4 for the first of four shards") from None
    if not 1 <= number <= count:
        raise UserError(f"--shard {text}: K must be between 1 and N (shards count from 1)")
    return number, count


def owner(student, count):
    """The shard (1..count) that grades `student`."""
    return int.from_bytes(hashlib.sha256(student.encode()).digest()[:8], "big") % count + 1


def default_folder(course, lesson, number, count):
    return course.root / "shards" / f"{lesson}-{number}-of-{count}"


def prepare(course, folder, lesson):
    """The shard folder as a Course that reads its submissions from `course`."""
    folder.mkdir(parents=True, exist_ok=True)
    if course.config_file.exists():
        shutil.copy(course.config_file, folder / course.config_file.name)
    for kind in ("source", "release"):
        if (course.root / kind / lesson).is_dir():
            shutil.rmtree(folder / kind / lesson, ignore_errors=True)
            shutil.copytree(course.root / kind / lesson, folder / kind / lesson)
    target = Course(folder, submissions=course.submitted_root)
    target.gradebook.unlink(missing_ok=True)
    if course.gradebook.exists():
        snapshot(course.gradebook, target.gradebook)
    return target


def snapshot(database, copy):
    """A consistent copy of an SQLite file that may be in use, opened read-only (the course may be mounted so)."""
    source = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)
    target = sqlite3.connect(copy)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()


def scheduler_task(environ=None):
    """The scheduler's name for the task grading this shard ("Slurm job 812_2", "Kubernetes pod grade-1-x7"), or
    None outside a scheduler: the merge names it when the task did not finish, so its fate can be looked up."""
    environ = os.environ if environ is None else environ
    if environ.get("SLURM_JOB_ID"):
        array, task = environ.get("SLURM_ARRAY_JOB_ID"), environ.get("SLURM_ARRAY_TASK_ID")
        return f"Slurm job {array}_{task}" if array and task else f"Slurm job {environ['SLURM_JOB_ID']}"
    if environ.get("JOB_COMPLETION_INDEX") is not None and environ.get("HOSTNAME"):
        return f"Kubernetes pod {environ['HOSTNAME']}"
    return None


def write_record(path, **fields):
    """RECORD in the shard folder `path`: lesson, shard, of, course, folder, students, finished."""
    temporary = path / f"{RECORD}.tmp"
    temporary.write_text(json.dumps(fields, indent=1))
    temporary.replace(path / RECORD)


def read_record(folder):
    path = Path(folder) / RECORD
    if not path.exists():
        raise UserError(f"{folder} is not a shard folder (no {RECORD}); give the --out folders of "
                        "`zerolab grade LESSON --shard K/N`")
    try:
        return json.loads(path.read_text())
    except ValueError:
        raise UserError(f"{path} is not readable JSON; grade that shard again") from None
