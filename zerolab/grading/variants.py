"""The submissions an exercise's tests are validated against: its reference solution, the blank release,
mutants of the solution, and the wrong and right answers written by hand (for the feedback regression suite, the
hostile corpus, and a lesson's own tests: LESSON_HANDWRITTEN).

Every variant is one solution cell's source and what its tests should make of it: "pass" or "fail".
"""
import copy
import importlib.util
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from zerolab.errors import UserError
from zerolab.grading.mutants import mutants, solution_lines


@dataclass(frozen=True)
class Variant:
    kind: str      # "reference", "blank", "mutant", "wrong" (written by hand), "right" (written by hand)
    source: str    # the solution cell's source
    expect: str    # "pass" or "fail"
    label: str     # what the report shows: a mutant's one-line diff, a hand-written answer's first line
    operator: str = ""


@dataclass
class Exercise:
    grade_id: str
    points: float
    solution: nbformat.NotebookNode
    test: nbformat.NotebookNode
    variants: list = field(default_factory=list)
    equivalent: dict = field(default_factory=dict)  # mutant label -> the instructor's reason


def exercises(source_nb):
    """(grade_id, solution cell index, test cell index) for each graded exercise: a solution cell and the grade
    cell named test_<grade_id> after it."""
    found = []
    cells = source_nb.cells
    for index, cell in enumerate(cells):
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution") and not meta.get("grade"):
            test_id = f"test_{meta['grade_id']}"
            tests = [i for i, c in enumerate(cells) if c.metadata.get("nbgrader", {}).get("grade_id") == test_id]
            if tests:
                found.append((meta["grade_id"], index, tests[0]))
    return found


def blank(cell):
    """The solution cell as the release hands it out, cleared by nbgrader's own ClearSolutions."""
    from nbgrader.preprocessors import ClearSolutions

    cleared = copy.deepcopy(cell)
    ClearSolutions()._replace_solution_region(cleared, "python")
    return cleared.source


def mutant_variants(source):
    return [Variant("mutant", m.source, "fail", m.diff, m.operator) for m in mutants(source, solution_lines(source))]


HANDWRITTEN = ("tests/submissions/feedback.py", "tests/submissions/corpus.py")
# A lesson's own hand-written answers: a module with VALIDATION = {grade_id: {"wrong": {name: cell}, "right": {name:
# cell}}}. Only that lesson's report depends on them (its digest covers the answers, not the file).
LESSON_HANDWRITTEN = {"08_zero_from_scratch": "tests/handmade_cases.py", "09_checkpoints": "tests/submissions/lesson09.py"}


def handwritten(repo, lesson):
    """{grade_id: [Variant]}: the feedback regression suite's wrong and right answers and the hostile corpus's
    wrong solution cells, from the repository's tests/submissions (none when the course has no repository)."""
    feedback, corpus = (_load(Path(repo) / path) for path in HANDWRITTEN)
    found = {}
    for grade_id, answers in (feedback.VARIANTS.get(lesson, {}) if feedback else {}).items():
        found[grade_id] = ([Variant("wrong", text, "fail", _first_line(text)) for text, _ in answers["wrong"]]
                           + [Variant("right", text, "pass", _first_line(text)) for text in answers["right"]])
    for grade_id, answers in lesson_answers(repo, lesson).items():
        found.setdefault(grade_id, []).extend(
            [Variant("wrong", text, "fail", f"hand-written: {name}") for name, text in answers["wrong"].items()]
            + [Variant("right", text, "pass", f"hand-written: {name}") for name, text in answers["right"].items()])
    if corpus and corpus.LESSON == lesson:
        for grade_id, texts in corpus.WRONG_ANSWERS.items():
            found.setdefault(grade_id, []).extend(Variant("wrong", text, "fail", "hostile corpus: " + _first_line(text))
                                                  for text in texts)
    return found


def lesson_answers(repo, lesson):
    """{grade_id: {"wrong": {name: cell}, "right": {name: cell}}} of LESSON_HANDWRITTEN, or {}."""
    module = _load(Path(repo) / LESSON_HANDWRITTEN[lesson]) if lesson in LESSON_HANDWRITTEN else None
    return module.VALIDATION if module else {}


def _load(path):
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location(f"zerolab_validate_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def settings(path):
    """The instructor's validation settings of a lesson (autograder/src/LESSON.equivalent.toml): the equivalent
    mutants, {(exercise, mutant diff): reason}, from its [[equivalent]] tables, and max_mutants, a sample size
    per exercise for a lesson whose every mutant costs real ranks (None: every mutant)."""
    if not path.exists():
        return {}, None
    try:
        data = tomllib.loads(path.read_text())
        equivalent = {(entry["exercise"], entry["mutant"]): entry["reason"] for entry in data.get("equivalent", [])}
    except (tomllib.TOMLDecodeError, KeyError, TypeError) as problem:
        raise UserError(f"{path}: every [[equivalent]] needs exercise, mutant (the diff as the report prints it) "
                        f"and reason: {problem}") from None
    limit = data.get("max_mutants")
    if limit is not None and (not isinstance(limit, int) or limit < 1):
        raise UserError(f"{path}: max_mutants must be a whole number of mutants per exercise, at least 1")
    return equivalent, limit


def _first_line(text):
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    line = " / ".join(lines[:2])
    return line if len(line) <= 100 else line[:97] + "..."
