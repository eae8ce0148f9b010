"""One autograder for both editions: `zerolab grade` grades Chinese submissions as it grades English ones.

For every lesson (lesson 08's editions are in tests/test_lesson08_grading.py's batch), one `zerolab grade` run
over the Chinese solutions (full marks: the points of every test cell in the lesson's source, cell by cell) and the
untouched Chinese release (0 on every cell, and every cell graded). The editions share their code cells
(tests/test_editions.py), so this is also the suite's grading of the whole English solution and release; each
English exercise alone is graded by tests/test_nbgrader_roundtrip.py. For lesson 01 a third
student answers the first exercise wrongly in the Chinese edition: the failing test's message reaches them in
Chinese, although the autograder put back the (shared, English-built) locked test cell; and a fourth, in the
English edition, gets the same mistake's message in English, with no Chinese anywhere in the notebook.
"""
import csv
import re
import sys
from pathlib import Path

import nbformat
import pytest

from tests.submissions.feedback import VARIANTS
from zerolab.grading.answers import with_answers
from zerolab.base.interpreter import env_with_interpreter_bin, python_module

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
import build  # noqa: E402

LESSONS = [name for name in build.lesson_names() if name != "08_zero_from_scratch"]  # test_lesson08_grading.py
CJK = re.compile(r"[\u4e00-\u9fff]")
pytestmark = pytest.mark.slow


def course_with(tmp_path, name, submissions):
    course = tmp_path / "course"
    (course / "source" / name).mkdir(parents=True)
    (course / "nbgrader_config.py").write_text((ROOT / "autograder" / "nbgrader_config.py").read_text())
    source = ROOT / "autograder" / "source" / name / f"{name}.ipynb"
    (course / "source" / name / source.name).write_text(source.read_text())
    for student, nb in submissions.items():
        folder = course / "submitted" / student / name
        folder.mkdir(parents=True)
        nbformat.write(nb, str(folder / f"{name}.ipynb"))
    return course


def grade(course, name):
    import subprocess
    done = subprocess.run(python_module("zerolab", "grade", name, "--course", str(course), "--jobs", "2"),
                          env=env_with_interpreter_bin(), capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(course / "grades.csv", newline="") as handle:
        return {row["student"]: row for row in csv.DictReader(handle)}


def read(path):
    return nbformat.read(str(path), as_version=4)


def why(course, name, row):
    """The grades.csv row and the errors of the student's graded cells, so a failure explains itself."""
    path = course / "autograded" / row["student"] / name / f"{name}.ipynb"
    if not path.exists():
        return f"{row}\n(no autograded notebook)"
    errors = [f"{cell.metadata['nbgrader']['grade_id']}: {out.ename}: {out.evalue[:300]}"
              for cell in read(path).cells if cell.metadata.get("nbgrader", {}).get("grade")
              for out in cell.get("outputs", []) if out.output_type == "error"]
    return "\n".join([str(row), *errors])


def points(name):
    """{grade_id: points} of every graded cell of the lesson's source: what full marks are."""
    source = read(ROOT / "autograder" / "source" / name / f"{name}.ipynb")
    return {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"]["points"] for c in source.cells
            if c.metadata.get("nbgrader", {}).get("grade")}


def cell_scores(course, name, student, grade_ids):
    """{grade_id: auto_score} from nbgrader's gradebook (None: the cell was not graded)."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        return {gid: gradebook.find_grade(gid, name, name, student).auto_score for gid in grade_ids}


@pytest.mark.parametrize("name", LESSONS)
def test_chinese_submissions_are_graded_as_the_english_ones(tmp_path, name):
    submissions = {"zh_solved": read(ROOT / "solutions" / "zh" / f"{name}.ipynb"),
                   "zh_untouched": read(ROOT / "lessons" / "zh" / f"{name}.ipynb")}
    wrong = None
    if name in VARIANTS:
        grade_id, variants = next(iter(VARIANTS[name].items()))
        wrong = (grade_id, variants["wrong"][0][0])
        submissions["zh_wrong"] = with_answers(submissions["zh_untouched"], {grade_id: wrong[1]})
        submissions["en_wrong"] = with_answers(read(ROOT / "lessons" / f"{name}.ipynb"), {grade_id: wrong[1]})
    course = course_with(tmp_path, name, submissions)
    rows = grade(course, name)
    cells = points(name)
    top = sum(cells.values())
    assert top > 0 and float(rows["zh_solved"]["max_score"]) == top, rows["zh_solved"]
    assert float(rows["zh_solved"]["score"]) == top, why(course, name, rows["zh_solved"])
    assert cell_scores(course, name, "zh_solved", cells) == cells, why(course, name, rows["zh_solved"])
    assert cell_scores(course, name, "zh_untouched", cells) == {gid: 0 for gid in cells}, \
        "the untouched release should score 0 on every test cell (None = the cell was not graded)"
    if wrong:
        messages = {}
        for student in ("zh_wrong", "en_wrong"):
            autograded = read(course / "autograded" / student / name / f"{name}.ipynb")
            test = next(c for c in autograded.cells
                        if c.metadata.get("nbgrader", {}).get("grade_id") == f"test_{wrong[0]}")
            (error,) = [out for out in test.outputs if out.output_type == "error"]
            assert error.ename == "AssertionError", (student, error.ename, error.evalue)
            messages[student] = error.evalue
            if student == "en_wrong":
                assert not any(CJK.search(out.get("evalue", "") + out.get("text", "")) for cell in autograded.cells
                               for out in cell.get("outputs", [])), "the English edition printed Chinese"
            else:
                assert autograded.metadata["zerolab"]["language"] == "zh"
        assert CJK.search(messages["zh_wrong"]), f"the Chinese edition's feedback is not in Chinese: {messages}"
        assert messages["zh_wrong"] != messages["en_wrong"], "the same words in both editions"
