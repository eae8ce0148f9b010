"""The hostile corpus (tests/submissions/corpus.py) graded in one batch with real nbgrader, in the sandbox,
with --jobs 3: each broken or hostile submission gets its expected status, score and reason, and every
correct submission in the same batch still gets full marks. Slow: a few minutes on 2 cores."""
import json
import re
from pathlib import Path

import nbformat
import pytest

from tests.submissions import corpus
from tests.leftovers import grading_processes_left
from tests.submissions.graded import zerolab

REPO = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def zerolab_grade(*args):
    return zerolab("grade", corpus.LESSON, *args)


@pytest.fixture(scope="module")
def graded(graded_corpus):
    run = graded_corpus
    return run.course, run.expected, run.rows, run.done, run.before


def test_corpus_is_big_enough():
    assert len(corpus.CASES) + len(corpus.FILE_CASES) >= 25


def test_every_submission_gets_its_expected_status_score_and_reason(graded):
    course, expected, rows, done, _ = graded
    assert set(rows) == set(expected), done.stdout + done.stderr
    wrong = []
    for student, (status, score, reason) in sorted(expected.items()):
        row = rows[student]
        got_score = float(row["score"]) if row["score"] else None
        if row["status"] != status or (score is not None and got_score != score) or reason not in row["reason"]:
            wrong.append(f"{student}: expected {status} {score} {reason!r}, got {row['status']} {got_score} "
                         f"{row['reason']!r}")
    assert not wrong, "\n".join(wrong)


def test_correct_students_in_the_same_batch_get_full_marks(graded):
    _, _, rows, _, _ = graded
    for student in corpus.CORRECT + ("nbformat_4_4", "deleted_test_cell", "duplicated_test_cell"):
        assert (rows[student]["status"], rows[student]["score"]) == ("graded", str(corpus.FULL)), rows[student]
    assert all(row["max_score"] == str(corpus.FULL) for row in rows.values())


def test_failed_and_missing_have_no_score_and_the_exit_status_says_so(graded):
    _, _, rows, done, _ = graded
    for row in rows.values():
        if row["status"] in ("failed", "missing"):
            assert row["score"] == "", row
    assert done.returncode == 1  # two submissions failed
    assert f"/{len(rows)}]" in done.stdout


def test_student_code_could_not_read_solutions_or_touch_others(graded):
    course, _, rows, _, before = graded
    reads = _outputs(course, "reads_solutions")
    assert "blocked" in reads and "READ " not in reads  # the cell prints "READ <path>" for any file it could open
    assert "BEGIN HIDDEN" not in reads and "### BEGIN SOLUTION" not in reads
    writes = _outputs(course, "writes_other_students")
    assert "WROTE" not in writes and "blocked gradebook" in writes
    assert "CONNECTED" not in _outputs(course, "network")
    after = {path: path.read_bytes() for path in (course / "submitted").rglob("*") if path.is_file()}
    assert after == before, "grading changed a submitted file"
    from nbgrader.api import Gradebook
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        assert gradebook.find_submission(corpus.LESSON, "ok_alice").score == corpus.FULL


def test_a_5mb_line_is_truncated_in_the_graded_notebook(graded):
    course, _, _, _, _ = graded
    assert (course / "autograded" / "prints_5mb_line" / corpus.LESSON / f"{corpus.LESSON}.ipynb").stat().st_size < 2e6


def test_writes_past_the_disk_cap_never_reach_the_grading_disk(graded):
    """The submission's folder and /tmp live on the capped tmpfs of its kernel: nothing it wrote is left."""
    course = graded[0]
    for student in ("many_files", "many_directories", "fills_folder_and_tmp"):
        left = [path.name for path in (course / "autograded" / student / corpus.LESSON).iterdir()]
        assert left == [f"{corpus.LESSON}.ipynb"], (student, left)


def test_no_grading_process_is_left_behind(graded):
    assert grading_processes_left() == []


def test_feedback_shows_visible_tests_but_no_hidden_test_source(graded):
    course = graded[0]
    done = zerolab_grade("--course", str(course), "--student", "rigged_eq_dict", "--feedback")
    assert done.returncode == 0, done.stdout + done.stderr
    html = (course / "feedback" / "rigged_eq_dict" / corpus.LESSON / f"{corpus.LESSON}.html").read_text()
    source = nbformat.read(course / "source" / corpus.LESSON / f"{corpus.LESSON}.ipynb", as_version=4)
    visible_line = "fp16 parameters and fp16 gradients take the same bytes"
    assert visible_line in html
    assert "_plain(model_state_bytes" not in html and "175_000_000_000" not in html  # hidden test source/traceback
    assert "wrong type: model_state_bytes(1000) should be a dict" in html  # the failure names the mistake class
    # a hidden line that repeats a line of the visible tests (a message both use) shows as the visible one
    shown = [re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", cell.source, flags=re.S)
             for cell in source.cells]
    visible = {line.strip() for text in shown for line in text.splitlines()}
    hidden = [line.strip() for cell in source.cells for line in _hidden(cell.source)
              if len(line.strip()) > 12 and line.strip() not in visible]
    assert hidden and not [line for line in hidden if line in html]


def _outputs(course, student):
    nb = json.loads((course / "autograded" / student / corpus.LESSON / f"{corpus.LESSON}.ipynb").read_text())
    return json.dumps([cell.get("outputs", []) for cell in nb["cells"]])


def _hidden(source):
    inside = False
    for line in source.splitlines():
        if "END HIDDEN TESTS" in line:
            inside = False
        if inside:
            yield line
        if "BEGIN HIDDEN TESTS" in line:
            inside = True
