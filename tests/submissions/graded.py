"""The hostile corpus graded once per test session, unsharded, with --jobs 3 (a sleeping case leaves its core idle):
the reference run that tests/test_grading_corpus.py, tests/test_grading_shards.py (sharded, then merged) and
tests/test_slurm_grading.py (a Slurm job array, then merged) compare against.
tests/conftest.py imports the fixture so both modules share one run."""
import csv
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.submissions import corpus

REPO = Path(__file__).resolve().parents[2]
SLOWEST = "notebook_too_long"


def zerolab(*args, timeout=1800):
    return subprocess.run([sys.executable, "-m", "zerolab", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def read_rows(course):
    with open(course / "grades.csv", newline="") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def normalised_rows(rows, course):
    """grades.csv rows with the course's own path in a reason replaced, to compare gradings of two courses."""
    return {student: {**row, "reason": row["reason"].replace(str(course), "<course>")} for student, row in rows.items()}


def gradebook_scores(course):
    """{student: (score, max_score)} of every submission nbgrader's gradebook holds for the lesson."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return {submission.student.id: (submission.score, submission.max_score)
                for submission in gradebook.find_assignment(corpus.LESSON).submissions}


@dataclass
class Graded:
    course: Path
    expected: dict  # student -> (status, score, reason)
    rows: dict  # grades.csv, read right after the run
    scores: dict  # the gradebook's scores, read right after the run
    done: subprocess.CompletedProcess
    before: dict  # the submitted files' bytes before grading


@pytest.fixture(scope="session")
def graded_corpus(tmp_path_factory):
    if not (REPO / "autograder" / "source" / corpus.LESSON).exists():
        pytest.fail(f"build the course first: python autograder/build.py --lesson {corpus.LESSON}")
    course = tmp_path_factory.mktemp("grading") / "course"
    corpus.write_course(course, REPO)
    first = zerolab("grade", corpus.LESSON, "--course", course, "--student", "nobody")  # generate_assignment only
    assert first.returncode == 0, first.stdout + first.stderr
    expected = corpus.write_submissions(course)
    # `zerolab grade` takes students in name order: the case that sleeps past the per-notebook cap goes first, so
    # its two minutes overlap the rest of the batch instead of ending it (239 s -> 161 s alone, idle 2 cores)
    (course / "submitted" / SLOWEST).rename(course / "submitted" / f"a_{SLOWEST}")
    expected[f"a_{SLOWEST}"] = expected.pop(SLOWEST)
    before = {path: path.read_bytes() for path in (course / "submitted").rglob("*") if path.is_file()}
    done = zerolab("grade", corpus.LESSON, "--course", course, "--jobs", "3")
    return Graded(course, expected, read_rows(course), gradebook_scores(course), done, before)
