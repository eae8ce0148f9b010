"""Feedback that teaches, checked through real `nbgrader autograde`: one batch per lesson.

For every exercise, tests/submissions/feedback.py holds plausible wrong answers, each with the words its message
must contain (the mistake class first), and correct answers in other styles than the course's solution.
Submission "answers_<i>" fills every exercise with its i-th answer, wrong ones first, then right ones (exercises are
graded independently: tests/test_nbgrader_roundtrip.py), so a lesson needs one generate_assignment and one autograde
call. A wrong answer must score 0 with an AssertionError whose message names the mistake; a right
answer must earn full points.
"""

import ast
import re

import nbformat
import pytest

from tests.submissions.feedback import CASCADES, NOT_COVERED, VARIANTS
from zerolab.grading.answers import with_answers
from test_nbgrader_roundtrip import course_root, failure, nbgrader, release_lesson, scores, submit  # noqa: F401
from test_nbgrader_roundtrip import exercises as exercise_cells

pytestmark = pytest.mark.slow


def cell_error(course, name, student, grade_id):
    """(ename, evalue) of the test cell's error in the autograded notebook, or None when it passed."""
    nb = nbformat.read(str(course / "autograded" / student / name / f"{name}.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    errors = [out for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    return (errors[0]["ename"], errors[0]["evalue"]) if errors else None


def cell_output(course, name, student, grade_id):
    """The text a test cell printed in the autograded notebook."""
    nb = nbformat.read(str(course / "autograded" / student / name / f"{name}.ipynb"), as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return "".join(out.get("text", "") for out in cell.get("outputs", []) if out.get("output_type") == "stream")


def solution_namespace(source):
    """The lesson's solutions defined in one namespace (the code cells that are not tests, demos or runs): what a
    message's call evaluates to when the answer is right."""
    namespace = {}
    for cell in source.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("grade") or re.search(r"widgets|run_in_notebook|zerolab_cli", cell.source):
            continue
        try:
            exec(compile(cell.source.replace("### BEGIN SOLUTION", "").replace("### END SOLUTION", ""), "<cell>",
                         "exec"), namespace)
        except Exception:  # a teaching cell that needs more than the solutions: not needed for the calls
            pass
    return namespace


CALL = re.compile(r"\b([a-z_]+)\(([^()]*)\)((?:\[[^\]]+\])*)")
NUMBER = re.compile(r"(?<![\w.])\d[\d,_]*(?:\.\d+)?(?:e[+-]?\d+)?")


def expected_in(message, namespace):
    """The numbers of ``message`` in which a learner would recognise the right answer to a call the message names
    (as given, in GB, GiB, MB or MiB, or rounded to three figures), outside the call's own arguments."""
    leaks = []
    for call in CALL.finditer(message):
        function = namespace.get(call.group(1))
        if not callable(function):
            continue
        try:
            want = eval(call.group(0), dict(namespace))  # noqa: S307 (the lesson's own solution, on the message's arguments)
        except Exception:
            continue
        wants = [want] if isinstance(want, (int, float)) else list(want.values()) if isinstance(want, dict) else []
        # what the learner returned, echoed after "got", is theirs already
        rest = re.sub(r"\bgot [^;]*", "", message[:call.start()] + message[call.end():])
        for text in NUMBER.findall(rest):
            digits = re.sub(r"\D", "", text.split("e")[0]).lstrip("0")
            if len(digits) < 3:  # "2 bytes a value", "stage 3": too short to give an answer away
                continue
            got = float(text.replace(",", "").replace("_", ""))
            for value in wants:
                forms = [value] + [value / size for size in (10**9, 2**30, 10**6, 2**20) if abs(value) >= size]
                if any(abs(got - form) <= 5e-3 * abs(form) for form in forms if form):
                    leaks.append(f"{text} in {message!r} gives away {call.group(0)}")
    return leaks


def test_expected_value_check_finds_a_leak():
    namespace = {"f": lambda x: 13 * 10**9 * x}
    assert expected_in("f(2) is not right: want 26000000000", namespace)
    assert expected_in("f(2) is not right: that is 26.0 GB", namespace)
    assert expected_in("f(2) is not right: 24.2 GiB", namespace)
    assert not expected_in("f(2) is not right: count 16 bytes per parameter", namespace)
    assert not expected_in("wrong type: f(2) should be a plain int, got str '26000000000'; write the number", namespace)


def test_variants_are_enough():
    for name, exercises in VARIANTS.items():
        for grade_id, variants in exercises.items():
            assert len(variants["wrong"]) >= 5 and len(variants["right"]) >= 3, f"{name} {grade_id}"


def packed(exercises):
    """{(grade_id, "wrong" or "right", k): student}: student "answers_<i>" fills each exercise with its i-th answer,
    its wrong ones first, then its right ones, so a lesson needs as many notebooks as its exercise with the most
    answers has. Exercises are graded independently (tests/test_nbgrader_roundtrip.py): a right answer beside
    another exercise's wrong one still earns its points."""
    return {(gid, kind, k): f"answers_{index}" for gid, variants in exercises.items()
            for index, (kind, k) in enumerate([("wrong", k) for k in range(len(variants["wrong"]))] +
                                              [("right", k) for k in range(len(variants["right"]))])}


def source_of(variants, kind, k):
    return variants[kind][k][0] if kind == "wrong" else variants[kind][k]


def test_packing_gives_each_answer_a_notebook_and_no_notebook_two_answers_to_one_exercise():
    exercises = {"a": {"wrong": [("w", "x")] * 3, "right": ["r"] * 2}, "b": {"wrong": [("w", "x")], "right": ["r"]}}
    holder = packed(exercises)
    assert len(holder) == 7 and len(set(holder.values())) == 5
    assert len({(gid, student) for (gid, _, _), student in holder.items()}) == len(holder)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_wrong_answers_name_their_mistake_and_right_ones_earn_full_points(course_root, name):
    exercises = VARIANTS[name]
    source, release, points = release_lesson(course_root, name)
    assert set(exercises) | NOT_COVERED.get(name, set()) == {
        c.metadata["nbgrader"]["grade_id"] for c in exercise_cells(source)}, \
        f"{name}: every exercise needs variants, and only exercises"
    holder = packed(exercises)
    for student in sorted(set(holder.values())):
        answers = {gid: source_of(exercises[gid], kind, k) for (gid, kind, k), held in holder.items() if held == student}
        submit(course_root, name, student, with_answers(release, answers))
    for k, (answers, _, _) in enumerate(CASCADES.get(name, [])):
        submit(course_root, name, f"cascade_{k}", with_answers(release, answers))
    rc, log = nbgrader(course_root, "autograde", name, "--force")
    assert rc == 0, f"nbgrader autograde {name} failed for a submission:\n{failure(log)}"

    problems = []
    namespace = solution_namespace(source)
    for grade_id, variants in exercises.items():
        test_id = "test_" + grade_id
        for k, (_, words) in enumerate(variants["wrong"]):
            words, absent = (words, None) if isinstance(words, str) else words  # (words, words it must not say)
            student = holder[grade_id, "wrong", k]
            got = scores(course_root, name, student, [test_id])[test_id]
            error = cell_error(course_root, name, student, test_id)
            if got != 0 or error is None:
                problems.append(f"{grade_id} wrong #{k}: scored {got}, no error")
            elif error[0] != "AssertionError" or words not in error[1]:
                problems.append(f"{grade_id} wrong #{k}: want {words!r} in an AssertionError, got {error[0]}: {error[1]!r}")
            elif absent and absent in error[1]:
                problems.append(f"{grade_id} wrong #{k}: {absent!r} does not fit this mistake: {error[1]!r}")
            else:
                problems += [f"{grade_id} wrong #{k}: {leak}" for leak in expected_in(error[1], namespace)]
        for k in range(len(variants["right"])):
            student = holder[grade_id, "right", k]
            got = scores(course_root, name, student, [test_id])[test_id]
            if got != points[test_id]:
                problems.append(f"{grade_id} right #{k}: scored {got} of {points[test_id]}: "
                                f"{cell_error(course_root, name, student, test_id)}")
    for k, (answers, test_id, words) in enumerate(CASCADES.get(name, [])):
        student = f"cascade_{k}"
        got = scores(course_root, name, student, [test_id])[test_id]
        if got != points[test_id]:
            problems.append(f"cascade #{k}: {test_id} scored {got} of {points[test_id]}: "
                            f"{cell_error(course_root, name, student, test_id)}")
        elif words not in cell_output(course_root, name, student, test_id):
            problems.append(f"cascade #{k}: {test_id} does not say {words!r}: "
                            f"{cell_output(course_root, name, student, test_id)!r}")
    assert not problems, f"{name}:\n" + "\n".join(problems)
