"""Real `nbgrader autograde` on a throw-away copy of the course, for every lesson, one batch of students:
"only_<grade_id>", the release with that one exercise's solution, must earn exactly that exercise's points and 0
elsewhere. This fails when an exercise's solution or its tests lean on another exercise (an earlier TODO left as
`raise NotImplementedError()`), or when one answer earns points in someone else's test cell. A lesson with many
exercises (lesson 07's questions) gets the same guarantee from fewer notebooks: for each bit of an exercise's index,
one notebook with the exercises whose bit is 1 solved and one with the rest. Any two exercises differ in some bit, so
each pair is split once each way: a test leaning on another exercise fails there, and an answer earning points in
another exercise's cell shows there.
The whole solution (full marks on every cell) and the untouched release (0 on every cell, every cell graded) are
graded cell by cell by tests/test_zh_grading.py in the Chinese edition, whose code cells are the English ones
(tests/test_editions.py), and by tests/test_lesson08_grading.py for lesson 08: not again here.
The expected points come from the cell metadata of the lesson source (autograder/src), not from nbgrader.
One generate_assignment and one autograde call per lesson for all its students.
"""
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from zerolab.grading.answers import with_solutions
from zerolab.base.interpreter import env_with_interpreter_bin

ROOT = Path(__file__).resolve().parent.parent
NBGRADER = Path(__file__).resolve().parent / "nbgrader_cli.py"  # nbgrader's command line, started a second sooner
LESSONS = sorted(p.stem for p in (ROOT / "autograder" / "src").glob("*.py") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def course_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", root)
    shutil.copytree(ROOT / "autograder" / "source", root / "source")
    return root


def nbgrader(root, *args):
    done = subprocess.run([sys.executable, str(NBGRADER), *args, f"--CourseDirectory.root={root}"], cwd=root,
                          env=env_with_interpreter_bin(), capture_output=True, text=True, timeout=900)
    return done.returncode, done.stdout + done.stderr


def failure(log):
    """What a failed autograde says about its failure: the log from the first error nbgrader reports (its traceback
    comes before its summary at the end), 4,000 characters."""
    starts = [at for at in (log.find("Traceback"), log.find("| ERROR]")) if at >= 0]
    return log[min(starts):min(starts) + 4000] if starts else log[-4000:]


def graded_cells(nb):
    """grade_id -> points of every automatically graded (code) cell."""
    return {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in nb.cells
            if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")}


def submit(root, name, student, nb):
    folder = root / "submitted" / student / name
    folder.mkdir(parents=True)
    nbformat.write(nb, str(folder / f"{name}.ipynb"))


def scores(root, name, student, grade_ids):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{root}/gradebook.db") as gradebook:
        return {gid: gradebook.find_grade(gid, name, name, student).auto_score for gid in grade_ids}


def release_lesson(root, name):
    """nbgrader generate_assignment for one lesson: (source notebook, release notebook, {test grade_id: points})."""
    source = nbformat.read(str(root / "source" / name / f"{name}.ipynb"), as_version=4)
    rc, log = nbgrader(root, "generate_assignment", name, "--force")
    assert rc == 0, log
    release = nbformat.read(str(root / "release" / name / f"{name}.ipynb"), as_version=4)
    return source, release, graded_cells(source)


def exercises(nb):
    """The code cells a learner fills in, in notebook order."""
    return [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]


@pytest.mark.slow
@pytest.mark.parametrize("name", LESSONS)
def test_autograde_each_exercise_alone(course_root, name):
    source, release, points = release_lesson(course_root, name)
    assert points, f"{name} has no graded cells"
    solved = [c.metadata["nbgrader"]["grade_id"] for c in exercises(source)]
    assert solved, f"{name} has no exercise cells"
    assert {"test_" + gid for gid in solved} <= set(points), f"{name}: an exercise has no test_<its id> cell"

    subsets = split_apart(solved)
    for student, chosen in subsets.items():
        submit(course_root, name, student, with_solutions(release, source, only=chosen))
    rc, log = nbgrader(course_root, "autograde", name, "--force")
    assert rc == 0, f"nbgrader autograde {name} failed for a submission:\n{failure(log)}"

    wrong = {}
    for student, chosen in subsets.items():
        expected = {gid: (pts if gid[len("test_"):] in chosen else 0) for gid, pts in points.items()}
        got = scores(course_root, name, student, points)
        if got != expected:
            wrong[student] = {gid: f"got {got[gid]}, want {expected[gid]}" for gid in points if got[gid] != expected[gid]}
    assert not wrong, f"{name}: with only these exercises solved ({subsets}), these scores are off: {wrong}"


def split_apart(exercises):
    """{student: [exercises solved]} such that any two exercises are solved apart, each without the other: one
    student per exercise, or, with fewer students, two per bit of the exercise's index."""
    bits = max(1, (len(exercises) - 1).bit_length())
    if len(exercises) <= 2 * bits:
        return {f"only_{grade_id}": [grade_id] for grade_id in exercises}
    return {f"bit{bit}_{value}": [gid for i, gid in enumerate(exercises) if (i >> bit) & 1 == value]
            for bit in range(bits) for value in (0, 1)}


def test_split_apart_separates_every_pair_both_ways():
    for count in (1, 3, 6, 7, 26):
        exercises = [f"ex{i}" for i in range(count)]
        subsets = split_apart(exercises)
        assert len(subsets) <= max(count, 1)
        for a in exercises:
            for b in exercises:
                if a != b:
                    assert any(a in chosen and b not in chosen for chosen in subsets.values()), (count, a, b)


def test_a_failures_message_starts_at_the_first_error_not_at_the_logs_end():
    log = "x" * 10_000 + "Traceback (most recent call last):\n  boom\n" + "y" * 10_000 + "| ERROR] summary"
    assert failure(log).startswith("Traceback") and "boom" in failure(log)
    assert failure("all fine " * 1000) == ("all fine " * 1000)[-4000:]
