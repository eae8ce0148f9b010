"""Each exercise earns its points on its own: real `nbgrader autograde`, one student per exercise.

Student "only_<grade_id>" hands in the release untouched except for that one exercise cell, which holds the
solution from the lesson source. They must get exactly that exercise's points and 0 on every other test cell.
This fails when an exercise's solution or its tests lean on another exercise (an earlier TODO left as
`raise NotImplementedError()`), or when one answer earns points in someone else's test cell.
One course, one generate_assignment and one autograde call per lesson for all its students.
"""
import pytest

from zerolab.grading.answers import with_solutions

from test_nbgrader_roundtrip import LESSONS, course_root, nbgrader, release_lesson, scores, submit  # noqa: F401


def exercises(nb):
    """The code cells a learner fills in, in notebook order."""
    return [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]


@pytest.mark.slow
@pytest.mark.parametrize("name", LESSONS)
def test_each_exercise_alone_earns_its_points(course_root, name):
    source, release, points = release_lesson(course_root, name)
    solved = {c.metadata["nbgrader"]["grade_id"]: c.source for c in exercises(source)}
    assert solved, f"{name} has no exercise cells"
    assert {"test_" + gid for gid in solved} <= set(points), f"{name}: an exercise has no test_<its id> cell"

    for grade_id in solved:
        submit(course_root, name, f"only_{grade_id}", with_solutions(release, source, only=[grade_id]))
    rc, log = nbgrader(course_root, "autograde", name, "--force")
    assert rc == 0, f"nbgrader autograde {name} failed for a submission:\n{log[-3000:]}"

    wrong = {}
    for grade_id in solved:
        expected = {gid: (pts if gid == "test_" + grade_id else 0) for gid, pts in points.items()}
        got = scores(course_root, name, f"only_{grade_id}", points)
        if got != expected:
            wrong[grade_id] = {gid: f"got {got[gid]}, want {expected[gid]}" for gid in points if got[gid] != expected[gid]}
    assert not wrong, f"{name}: with only one exercise solved, these scores are off: {wrong}"
