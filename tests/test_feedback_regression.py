"""Feedback that teaches, checked through real `nbgrader autograde`: one batch per lesson.

For every exercise, tests/submissions/feedback.py holds plausible wrong answers, each with the words its message
must contain (the mistake class first), and correct answers in other styles than the course's solution.
Submission "wrong_<k>" fills every exercise with its k-th wrong answer and "right_<k>" with its k-th right one
(exercises are graded independently: tests/test_nbgrader_roundtrip.py), so a lesson needs one generate_assignment
and one autograde call. A wrong answer must score 0 with an AssertionError whose message names the mistake; a right
answer must earn full points.
"""

import nbformat
import pytest

from tests.submissions.feedback import NOT_COVERED, VARIANTS
from zerolab.grading.answers import with_answers
from test_nbgrader_roundtrip import course_root, nbgrader, release_lesson, scores, submit  # noqa: F401
from test_nbgrader_roundtrip import exercises as exercise_cells

pytestmark = pytest.mark.slow


def cell_error(course, name, student, grade_id):
    """(ename, evalue) of the test cell's error in the autograded notebook, or None when it passed."""
    nb = nbformat.read(str(course / "autograded" / student / name / f"{name}.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    errors = [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    return (errors[0]["ename"], errors[0]["evalue"]) if errors else None


def test_variants_are_enough():
    for name, exercises in VARIANTS.items():
        for grade_id, variants in exercises.items():
            assert len(variants["wrong"]) >= 5 and len(variants["right"]) >= 3, f"{name} {grade_id}"


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_wrong_answers_name_their_mistake_and_right_ones_earn_full_points(course_root, name):
    exercises = VARIANTS[name]
    source, release, points = release_lesson(course_root, name)
    assert set(exercises) | NOT_COVERED.get(name, set()) == {
        c.metadata["nbgrader"]["grade_id"] for c in exercise_cells(source)}, \
        f"{name}: every exercise needs variants, and only exercises"
    rounds = {kind: max(len(v[kind]) for v in exercises.values()) for kind in ("wrong", "right")}
    for kind, count in rounds.items():
        for k in range(count):
            answers = {gid: v[kind][k] if kind == "right" else v[kind][k][0]
                       for gid, v in exercises.items() if k < len(v[kind])}
            submit(course_root, name, f"{kind}_{k}", with_answers(release, answers))
    rc, log = nbgrader(course_root, "autograde", name, "--force")
    assert rc == 0, f"nbgrader autograde {name} failed for a submission:\n{log[-3000:]}"

    problems = []
    for grade_id, variants in exercises.items():
        test_id = "test_" + grade_id
        for k, (_, words) in enumerate(variants["wrong"]):
            student = f"wrong_{k}"
            got = scores(course_root, name, student, [test_id])[test_id]
            error = cell_error(course_root, name, student, test_id)
            if got != 0 or error is None:
                problems.append(f"{grade_id} wrong #{k}: scored {got}, no error")
            elif error[0] != "AssertionError" or words not in error[1]:
                problems.append(f"{grade_id} wrong #{k}: want {words!r} in an AssertionError, got {error[0]}: {error[1]!r}")
        for k in range(len(variants["right"])):
            student = f"right_{k}"
            got = scores(course_root, name, student, [test_id])[test_id]
            if got != points[test_id]:
                problems.append(f"{grade_id} right #{k}: scored {got} of {points[test_id]}: "
                                f"{cell_error(course_root, name, student, test_id)}")
    assert not problems, f"{name}:\n" + "\n".join(problems)
