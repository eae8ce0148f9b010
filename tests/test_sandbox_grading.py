"""What validation counts on, graded as a class by `zerolab grade` in the sandbox (scripts/grade_in_sandbox.py,
docs/sandbox_grading.json): lessons 08 and 09's hand-written answers and every lesson's allowlisted equivalent
mutants. The committed result is of the current lessons and answers, covers every answer, and every run graded
every answer as expected."""
import json
from pathlib import Path

import pytest

from repo_scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = ("regenerate it: `nice python scripts/grade_in_sandbox.py --lesson LESSON` (3 runs; lesson 08: about "
              "3.5 minutes a run on 2 cores)")
SCRIPT = load_script("grade_in_sandbox")
RESULTS = json.loads(SCRIPT.RESULT.read_text()) if SCRIPT.RESULT.exists() else {}


@pytest.mark.parametrize("lesson", SCRIPT.LESSONS)
def test_the_committed_class_result_is_fresh(lesson):
    assert lesson in RESULTS, f"{SCRIPT.RESULT.name} has no {lesson}: {REGENERATE}"
    assert RESULTS[lesson]["digest"] == SCRIPT.digest(lesson), \
        f"{SCRIPT.RESULT.name} is stale for {lesson} (the lesson, its answers or the grading config changed): {REGENERATE}"


@pytest.mark.parametrize("lesson", SCRIPT.LESSONS)
def test_every_answer_was_graded_as_expected_three_runs_in_a_row(lesson):
    result = RESULTS[lesson]
    graded = {(entry["exercise"], entry["kind"], entry["answer"]) for entry in result["answers"]}
    assert graded == {(exercise, kind, name) for exercise, entries in SCRIPT.answers(lesson).items()
                      for kind, name, _ in entries}
    assert len(result["runs"]) >= 3
    for run in result["runs"]:
        assert run["unexpected"] == [], run["unexpected"]
        # "review": scored, and grades.csv asks a human to look, naming the cell and line (a wrong answer that
        # reaches for __import__, a right one that starts ds_to_universal as a subprocess)
        assert set(run["statuses"]) <= {"graded", "review"}, run["not_graded_plainly"]
        assert all(why.startswith("review: cell ") for why in run["not_graded_plainly"].values())


def test_a_class_holds_each_answer_once_and_expects_zero_only_where_it_is_wrong():
    lesson = "09_checkpoints"
    classes = SCRIPT.students(lesson)
    held = [(exercise, name) for answers in classes.values() for exercise, (_, name, _) in answers.items()]
    hand_written = SCRIPT.variants.lesson_answers(ROOT, lesson)
    allowlisted, _ = SCRIPT.variants.settings(ROOT / "autograder" / "src" / f"{lesson}.equivalent.toml")
    assert len(held) == len(set(held)) == len(allowlisted) + sum(len(cases["wrong"]) + len(cases["right"])
                                                                 for cases in hand_written.values())
    first = classes["student00"]  # the first answer of each exercise: a wrong one
    assert {kind for kind, _, _ in first.values()} == {"wrong"}
    assert set(SCRIPT.expected_scores(lesson, first).values()) == {0.0}
    last = classes[max(classes)]  # ex5's last entry, an equivalent mutant; the exercises with fewer hold the solution
    assert SCRIPT.expected_scores(lesson, last) == {grade_id: float(value)
                                                     for grade_id, value in SCRIPT.points(lesson).items()}
