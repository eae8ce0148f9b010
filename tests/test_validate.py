"""zerolab grade validate, on a toy course whose verdicts plain Python can recompute, and on the real lessons.

The toy course's exercise (a circle's area) has a test that kills every mutant and a weak one that doesn't: for
each mutant the validator's verdict must be what exec() of the mutant and the test in a fresh namespace says.
"""
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from zerolab.errors import UserError
from zerolab.grading import validate, validate_report
from zerolab.grading.variants import settings

ROOT = Path(__file__).resolve().parent.parent
SOLUTION = '''def area(radius):
    """The area of a circle."""
    ### BEGIN SOLUTION
    squared = radius ** 2
    return math.pi * squared
    ### END SOLUTION
'''
STRONG = "assert abs(area(1) - math.pi) < 1e-9\nassert abs(area(3) - 9 * math.pi) < 1e-9\n"
WEAK = "assert area(0) == 0\n"


def toy_course(root, test=STRONG, solution=SOLUTION, allowlist=None):
    def meta(grade_id, **flags):
        return {"nbgrader": {"grade_id": grade_id, "locked": not flags.get("solution"), "schema_version": 3,
                             "solution": False, "grade": False, "task": False, **flags}}

    cells = [nbformat.v4.new_code_cell("import math"),
             nbformat.v4.new_code_cell(solution, metadata=meta("ex1_area", solution=True)),
             nbformat.v4.new_code_cell(test, metadata=meta("test_ex1_area", grade=True, points=2))]
    folder = root / "autograder" / "source" / "toy"
    folder.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=cells), str(folder / "toy.ipynb"))
    if allowlist:
        (root / "autograder" / "src").mkdir()
        (root / "autograder" / "src" / "toy.equivalent.toml").write_text(allowlist)
    return root / "autograder"


def passes_in_plain_python(solution, test):
    namespace = {}
    try:
        exec("import math\n" + solution + "\n" + test, namespace)
        return True
    except Exception:  # noqa: BLE001 - any error fails the test cell
        return False


def rows(result, kind=None):
    (exercise,) = result["exercises"]
    return [row for row in exercise["variants"] if kind is None or row["kind"] == kind]


def test_each_mutant_gets_the_verdict_plain_python_gives_it(tmp_path):
    from zerolab.grading.mutants import mutants, solution_lines

    result = validate.validate_lesson(toy_course(tmp_path, test=STRONG), "toy", runs=2, jobs=2)
    expected = {m.diff: passes_in_plain_python(m.source, STRONG)
                for m in mutants(SOLUTION, solution_lines(SOLUTION))}
    got = {row["label"]: row["passed"] for row in rows(result, "mutant")}
    assert got == expected and len(got) >= 5
    assert [row["passed"] for row in rows(result, "reference")] == [True, True]
    assert [row["passed"] for row in rows(result, "blank")] == [False]
    assert validate_report.below_bar(result) == []


def test_a_weak_test_lets_mutants_through_and_misses_the_bar(tmp_path):
    result = validate.validate_lesson(toy_course(tmp_path, test=WEAK), "toy", runs=1, jobs=2)
    survivors = validate_report.tally(result["exercises"][0])["survivors"]
    assert any(row["label"].endswith("return None") or "radius ** 3" in row["label"] for row in survivors)
    (missed,) = validate_report.below_bar(result)
    assert missed.startswith("ex1_area (") and "of mutants killed" in missed
    report = validate_report.markdown(result)
    assert "**Below the bar:** ex1_area" in report and f"survived ({survivors[0]['operator']})" in report


def test_stderr_in_the_test_cell_scores_nothing_as_in_nbgrader(tmp_path):
    # a subprocess writing to the kernel's stderr: caught at the file descriptor, like a kernel's output
    noisy = SOLUTION.replace('    """The area of a circle."""\n',
                             '    """The area of a circle."""\n    import os\n    os.system("echo careful >&2")\n')
    result = validate.validate_lesson(toy_course(tmp_path, solution=noisy), "toy", runs=1, only=["ex1_area"])
    (reference,) = rows(result, "reference")
    assert not reference["passed"] and reference["output"] == "stderr: careful"
    assert validate_report.tally(result["exercises"][0])["flakes"] == 1


def test_a_mutant_that_never_ends_is_stopped_and_killed(tmp_path):
    looping = SOLUTION.replace("    squared = radius ** 2\n", "    squared = radius ** 2\n    while squared < 0:\n"
                                                                "        squared = squared + 1\n")
    result = validate.validate_lesson(toy_course(tmp_path, solution=looping), "toy", runs=1, timeout_floor=2)
    stopped = [row for row in rows(result, "mutant") if "timeout" in row["output"]]
    assert stopped and not any(row["passed"] for row in stopped)
    assert all(row["seconds"] < 10 for row in stopped)


def test_an_allowlisted_mutant_is_equivalent_and_a_stale_entry_is_named(tmp_path):
    first = validate.validate_lesson(toy_course(tmp_path / "a", test=WEAK), "toy", runs=1)
    survivors = validate_report.tally(first["exercises"][0])["survivors"]
    allowlist = "".join(f'[[equivalent]]\nexercise = "ex1_area"\nmutant = {json.dumps(row["label"])}\n'
                        f'reason = "the weak test cannot tell"\n' for row in survivors)
    allowlist += '[[equivalent]]\nexercise = "ex1_area"\nmutant = "line 99: gone  ->  away"\nreason = "old"\n'
    second = validate.validate_lesson(toy_course(tmp_path / "b", test=WEAK, allowlist=allowlist), "toy", runs=1)
    counts = validate_report.tally(second["exercises"][0])
    assert counts["equivalent"] == len(survivors) and counts["survivors"] == []
    assert second["stale_equivalents"] == ["ex1_area: line 99: gone  ->  away"]
    assert "the weak test cannot tell" in validate_report.markdown(second)


def test_a_broken_allowlist_says_which_fields_it_needs(tmp_path):
    bad = tmp_path / "x.equivalent.toml"
    bad.write_text('[[equivalent]]\nexercise = "ex1_area"\n')
    with pytest.raises(UserError, match="exercise, mutant .* and reason"):
        settings(bad)
    bad.write_text("max_mutants = 0\n")
    with pytest.raises(UserError, match="max_mutants must be a whole number"):
        settings(bad)


def test_a_course_sample_spreads_over_the_mutants_and_says_so(tmp_path):
    course = toy_course(tmp_path, allowlist="max_mutants = 3\n")
    result = validate.validate_lesson(course, "toy", runs=1)
    (exercise,) = result["exercises"]
    assert len(rows(result, "mutant")) == 3 and exercise["mutants_made"] > 6
    assert result["sample_by"] == "course" and "at most 3 mutants per exercise" in validate_report.markdown(result)
    lines = [int(row["label"].split(":")[0].split()[1]) for row in rows(result, "mutant")]
    assert lines == sorted(lines) and lines[0] < lines[-1]


def test_the_command_names_the_lessons_when_given_a_wrong_one():
    done = subprocess.run([sys.executable, "-m", "zerolab", "grade", "validate", "10_nothing"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0 and "01_where_memory_goes" in done.stderr and "Traceback" not in done.stderr
