"""A student's first hour (issue 25, items 1 and 2): Run All reaches the end, and no answer is in sight before it.

Every lesson's release, in both editions, is executed as Run All runs it with no exercise answered (nbclient, as
tests/test_notebooks.py runs notebooks). Then:

- the only errors are in the exercises' own cells: every teaching cell ran, and a cell that needs an answer printed
  one line instead of raising;
- no output above an exercise, or right after it (up to the next exercise), shows that exercise's expected value or
  letter. The expected values are read back from the solution notebook executed in a kernel (each exercise's
  answer variables as JSON), never typed here. Only exercises that assign values are scanned: a function exercise is
  graded on inputs the learner never sees, so a value printed as an example is not its answer.
"""
import json
import math
import os
import re
from collections import Counter
from pathlib import Path

import jupytext
import nbformat
import pytest
from nbclient import NotebookClient

from session_cache import run_cache
from zerolab.lesson import drill
from zerolab.base.interpreter import poll_shell_in_slices

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted(p.stem for p in (ROOT / "autograder" / "src").glob("*.py") if not p.name.startswith("_"))
ANSWER_NAME = re.compile(r"^([A-Z][A-Z0-9_]*)\s*=", re.M)


def execute(nb, tmp_path, language, grading=False, cache=None):
    """Run All in a fresh kernel; ``grading``: as nbgrader runs it (NBGRADER_EXECUTION set: real runs skip);
    ``cache``: the session's run cache, where the teaching runs of another execution of the lesson are kept."""
    env = {"ZEROLAB_STATIC": "1", "DS_ACCELERATOR": "cpu", "ZEROLAB_LANG": language,
           "NBGRADER_EXECUTION": "autograde" if grading else None, "ZEROLAB_RUN_CACHE": cache and str(cache)}
    saved = {key: os.environ.get(key) for key in env}
    for key, value in env.items():
        os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    try:
        client = NotebookClient(nb, timeout=900, kernel_name="python3", allow_errors=True,
                                resources={"metadata": {"path": str(tmp_path)}})
        client.on_notebook_start = poll_shell_in_slices(client)
        client.execute()
    finally:
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    return nb


def graded(cell):
    meta = cell.metadata.get("nbgrader", {})
    return bool(meta.get("solution") or meta.get("grade"))


def is_exercise(cell):
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and meta.get("solution") and not meta.get("grade")


def answer_names(source):
    return list(dict.fromkeys(ANSWER_NAME.findall(source)))


_expected = {}


def expected_answers(name, tmp_path):
    """{exercise grade_id: {answer name: value}} from the solution notebook, executed here and asked for its values.
    It runs as the grader runs it: the answers are what is graded, and the real runs (lessons 06, 08, 09) skip.
    Only the cells up to the last exercise that assigns an answer run, without the test cells: an answer is set by
    its own cell (and the teaching above it), and lesson 09's tests would save checkpoints on ranks first."""
    if name not in _expected:
        nb = nbformat.read(str(ROOT / "solutions" / f"{name}.ipynb"), as_version=4)
        names = {cell.metadata["nbgrader"]["grade_id"]: answer_names(cell.source) for cell in nb.cells if is_exercise(cell)}
        names = {grade_id: found for grade_id, found in names.items() if found}
        if not names:
            _expected[name] = {}
            return {}
        wanted = sorted({n for found in names.values() for n in found})
        tmp_path.mkdir(exist_ok=True)
        last = max(i for i, cell in enumerate(nb.cells) if is_exercise(cell) and answer_names(cell.source))
        nb.cells = [cell for cell in nb.cells[:last + 1] if not cell.metadata.get("nbgrader", {}).get("grade")]
        nb.cells.append(nbformat.v4.new_code_cell(
            f"import json\nprint(json.dumps({{n: globals()[n] for n in {wanted!r}}}))"))
        execute(nb, tmp_path, "en", grading=True)
        values = json.loads("".join(out.get("text", "") for out in nb.cells[-1].outputs))
        _expected[name] = {grade_id: {n: values[n] for n in found} for grade_id, found in names.items()}
    return _expected[name]


def number_forms(value):
    """How a number would be printed: as given, in GB or GiB when it is bytes, as a percentage when a fraction.
    A single digit alone is everywhere in a lesson's outputs, so it is left out."""
    shown = [value] + ([value / 1e9, value / 2**30] if abs(value) >= 1e6 else [])
    forms = set()
    for x in shown:
        if float(x).is_integer() and abs(x) < 10:
            continue
        forms |= {f"{x:.2f}", f"{x:g}"} | ({f"{x:.1f}", f"{x:.0f}"} if abs(x) >= 10 else set())
        if float(x).is_integer():
            forms |= {f"{int(x)}", f"{int(x):,}"}
    if 0 < value < 1:
        forms |= {f"{value:.1%}", f"{value:.0%}"}
    return [rf"(?<![\w.]){re.escape(form)}(?!\.?\d)" for form in forms]


def answer_patterns(name, value):
    """Regular expressions for ``value``, the expected answer of ``name``, as a learner would recognise it."""
    patterns = [rf"\b{name}\s*=\s*{re.escape(repr(value))}"]
    if isinstance(value, dict):
        patterns += [re.escape(json.dumps(value)), re.escape(repr(value))]
    if isinstance(value, str) and len(value) == 1 and value in drill.LETTERS:
        patterns += [rf"(?i)\banswer\b\W{{0,6}}{value}\b", rf"答案\W{{0,6}}{value}\b", rf"['\"]{value}['\"]"]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        patterns += number_forms(value)
    elif isinstance(value, dict) and value and all(type(v) in (int, float) for v in value.values()):
        for leaf in value.values():
            patterns += number_forms(leaf)
    return patterns


def output_text(cell):
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
        else:
            parts += [out.get("data", {}).get(kind, "") for kind in ("text/plain", "text/markdown")]
    return "".join(parts)


def answers_in_sight(nb, expected):
    """[(exercise, answer name, cell index, pattern)] for each expected answer an output shows before it is answered."""
    cells = nb.cells
    exercises = [i for i, cell in enumerate(cells) if is_exercise(cell)]
    found = []
    for k, i in enumerate(exercises):
        grade_id = cells[i].metadata["nbgrader"]["grade_id"]
        end = exercises[k + 1] if k + 1 < len(exercises) else len(cells)
        for name, value in expected.get(grade_id, {}).items():
            patterns = answer_patterns(name, value)
            for j in range(end):
                text = output_text(cells[j]) if cells[j].cell_type == "code" else ""
                hit = next((p for p in patterns if re.search(p, text)), None)
                if hit:
                    found.append((grade_id, name, j, hit))
    return found


def errors_outside_exercises(nb):
    return [(i, cell.source.splitlines()[0] if cell.source else "", f"{out.ename}: {out.evalue}"[:200])
            for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and not graded(cell)
            for out in cell.get("outputs", []) if out.output_type == "error"]


@pytest.mark.slow
@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("name", LESSONS)
def test_run_all_of_an_unanswered_release_reaches_the_end_with_no_answer_in_sight(name, language, tmp_path,
                                                                                 tmp_path_factory):
    folder = ROOT / "lessons" / ("zh" if language == "zh" else "")
    nb = execute(nbformat.read(str(folder / f"{name}.ipynb"), as_version=4), tmp_path, language,
                 cache=run_cache(tmp_path_factory))
    unrun = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and not cell.execution_count]
    assert not unrun, f"{name} ({language}): Run All never reached cells {unrun}"
    assert not errors_outside_exercises(nb), f"{name} ({language}): teaching cells raised without answers: " \
                                             f"{errors_outside_exercises(nb)}"
    assert any(out.output_type == "error" for cell in nb.cells if graded(cell) for out in cell.outputs) \
        or not any(graded(cell) for cell in nb.cells), "an unanswered release's tests should fail"
    shown = answers_in_sight(nb, expected_answers(name, tmp_path / "solution"))
    assert not shown, f"{name} ({language}): answers in outputs before they are answered: {shown}"


def test_the_scan_finds_an_answer_printed_before_it_is_answered():
    """answers_in_sight on a tiny notebook: a letter, a GB figure and a fraction are found above or right after."""
    cells = [nbformat.v4.new_code_cell("print(x)", outputs=[nbformat.v4.new_output("stream", text="Answer: C.\n")]),
             nbformat.v4.new_code_cell("Q01 = 1", metadata={"nbgrader": {"solution": True, "grade_id": "ex1"}}),
             nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output("stream", text="saved 12.25 GB\n")]),
             nbformat.v4.new_code_cell("Q02 = 1", metadata={"nbgrader": {"solution": True, "grade_id": "ex2"}}),
             nbformat.v4.new_code_cell("", outputs=[nbformat.v4.new_output("stream", text="ZeRO-1 keeps 34.4%\n")])]
    nb = nbformat.v4.new_notebook(cells=cells)
    shown = answers_in_sight(nb, {"ex1": {"Q01": "C", "SAVED": 12.25e9}, "ex2": {"Q02": 0.34375, "Q03": "D"}})
    assert [(grade_id, name, j) for grade_id, name, j, _ in shown] == [("ex1", "Q01", 0), ("ex1", "SAVED", 2),
                                                                       ("ex2", "Q02", 4)]
    assert not answers_in_sight(nb, {"ex1": {"Q01": 7}}), "a single digit alone is not scanned"


def drill_options(cell_source):
    """{letter: option text} of a multiple-choice markdown cell ("# - A: text", continued on indented lines)."""
    options, letter = {}, None
    for line in cell_source.splitlines():
        match = re.match(r"- ([A-D])[:：](.*)", line)
        if match:
            letter = match.group(1)
            options[letter] = match.group(2).strip()
        elif letter and line.startswith("  ") and line.strip():
            options[letter] += " " + line.strip()
        else:
            letter = None
    return options


def test_drill_lists_the_options_in_the_engines_order_and_spreads_the_right_letters():
    cells = jupytext.read(ROOT / "autograder" / "src" / "07_interview_drill.py", fmt="py:percent").cells
    for question, options in drill.OPTIONS.items():
        heading = re.compile(rf"^## {question}\b", re.M)
        english = [c for c in cells if c.cell_type == "markdown" and heading.search(c.source)
                   and c.metadata.get("lang") != "zh"]
        chinese = [c for c in cells if c.cell_type == "markdown" and heading.search(c.source)
                   and c.metadata.get("lang") == "zh"]
        assert len(english) == 1 and len(chinese) == 1, f"{question}: one English and one Chinese question cell"
        assert drill_options(english[0].source) == {drill.LETTERS[i]: text for i, (_, text) in enumerate(options)}, \
            f"{question}: the lesson lists its options in another order than zerolab.lesson.drill"
        assert sorted(drill_options(chinese[0].source)) == list(drill.LETTERS[:len(options)]), \
            f"{question}: the Chinese cell lists other letters"
    keys = Counter(drill.key(question) for question in drill.OPTIONS)
    assert max(keys.values()) <= math.ceil(len(drill.OPTIONS) / 3), f"one letter is right too often: {keys}"
    source = (ROOT / "autograder" / "src" / "07_interview_drill.py").read_text(encoding="utf-8")
    for question in drill.OPTIONS:  # the solution writes its letter, as a student must; the key grades it
        typed = re.findall(rf"""^{question} = ["']([A-D])["']""", source, re.M)
        assert typed == [drill.key(question)], f"{question}: the solution's letter {typed} is not zerolab.lesson.drill's key"
        assert not re.search(r"""== ["'][A-D]["']""", source), "a test compares with a letter typed into the lesson"
