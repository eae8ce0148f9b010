"""Repair a submission before nbgrader sees it, in a staged copy; the student's files are never changed.

nbgrader stops on things students do every term: a copy-pasted graded cell aborts the whole batch (#1083),
flipped cell flags fail a submission (#1423), a renamed notebook is "not found" (#1302), and a file that is
not JSON fails it. Here each is repaired from the release notebook where possible, or turned into a status
with a reason; then nbgrader grades the staged copy (CourseDirectory.submitted_directory points at it).
"""
import json
import shutil
from dataclasses import dataclass, field

import nbformat

from zerolab.grading import scan

FLAG_KEYS = ("grade", "grade_id", "locked", "points", "schema_version", "solution", "task")


@dataclass
class Staged:
    status: str = ""  # "" (go on and grade) | "missing" | "failed"
    reasons: list = field(default_factory=list)  # what was repaired or why it stopped
    review: list = field(default_factory=list)  # what a human should look at


def stage(course, student, lesson):
    """Copy submitted/<student>/<lesson> to the staging area, repaired; say what happened."""
    result = Staged()
    submitted, staged = course.submitted(student, lesson), course.staged(student, lesson)
    shutil.rmtree(staged, ignore_errors=True)
    if not submitted.is_dir():
        result.status = "missing"
        result.reasons.append(f"no folder submitted/{student}/{lesson}")
        return result
    _copy_plain_files(submitted, staged, result)
    _drop_unknown_files(staged, course.release_notebook(lesson).parent, result)
    notebooks = sorted(staged.glob("*.ipynb"))
    expected = staged / f"{lesson}.ipynb"
    if not notebooks:
        result.status = "missing"
        result.reasons.append(f"no notebook in submitted/{student}/{lesson}/")
        return result
    release = nbformat.read(course.release_notebook(lesson), as_version=4)
    if expected not in notebooks:
        chosen = max(notebooks, key=lambda path: _matching_cells(path, release))
        chosen.rename(expected)
        result.review.append(f"the notebook was named {chosen.name!r}; graded it as {expected.name}")
    for extra in notebooks:
        if extra.exists() and extra != expected:
            extra.rename(extra.with_suffix(".ipynb.ignored"))
            result.reasons.append(f"ignored the extra notebook {extra.name}")
    try:
        notebook = nbformat.reads(expected.read_text(errors="replace"), as_version=4)
    except Exception as error:  # nbformat raises several kinds; all mean "not a notebook we can read"
        result.status = "failed"
        result.reasons.append(f"{expected.name} is not a readable notebook ({_short(error)}); ask the student to "
                              "download it again from Jupyter (File > Download) and resubmit")
        return result
    result.reasons += repair(notebook, release)
    nbformat.write(notebook, expected)
    result.review += [f"cell {where}: {what}" for where, what in findings(notebook, release)]
    return result


def repair(notebook, release):
    """Fix the nbgrader metadata of `notebook` in place from `release`; return what was changed."""
    reference = {cell.metadata["nbgrader"]["grade_id"]: cell.metadata["nbgrader"]
                 for cell in release.cells if "grade_id" in cell.metadata.get("nbgrader", {})}
    changes, seen = [], set()
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader")
        if meta is None:
            continue
        grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
        if grade_id not in reference:
            del cell.metadata["nbgrader"]
            changes.append(f"dropped nbgrader metadata of unknown cell {grade_id!r}")
        elif grade_id in seen:
            del cell.metadata["nbgrader"]
            changes.append(f"a copy of cell {grade_id} was kept as an ungraded cell")
        else:
            seen.add(grade_id)
            altered = [key for key in FLAG_KEYS if meta.get(key) != reference[grade_id].get(key)]
            if altered:
                changes.append(f"restored {', '.join(altered)} of cell {grade_id} from the release")
            cell.metadata["nbgrader"] = dict(reference[grade_id])
    return changes


def findings(notebook, release):
    """Static-scan findings in the cells the student could write: [(cell label, finding)]."""
    locked = {cell.metadata["nbgrader"]["grade_id"] for cell in release.cells
              if cell.metadata.get("nbgrader", {}).get("locked")}
    helpers = _test_names(release)
    found = []
    for index, cell in enumerate(notebook.cells, 1):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type != "code" or grade_id in locked:
            continue  # nbgrader restores locked cells from the gradebook
        found += [(grade_id or f"#{index}", what) for what in scan.scan_cell(cell.source, helpers)]
    return found


def _test_names(release):
    """Names the release's locked cells import or define with def/class (test helpers), and zerolab.lesson.checks'.
    Plain variables a test assigns itself (answer = ...) are not protected: the test sets them before use."""
    import ast

    names = set()
    for cell in release.cells:
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("locked"):
            try:
                tree = ast.parse(scan._without_magics(cell.source))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
                    names.update(scan._bound_names(node))
    try:
        from zerolab.lesson import checks
        names.update(name for name in dir(checks) if not name.startswith("_"))
    except ImportError:
        pass
    return names - {"json"}


def _matching_cells(path, release):
    ids = {cell.metadata.get("nbgrader", {}).get("grade_id") for cell in release.cells} - {None}
    try:
        cells = json.loads(path.read_text(errors="replace")).get("cells", [])
        return sum(1 for cell in cells if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") in ids)
    except (ValueError, AttributeError):
        return -1


def _copy_plain_files(source, target, result):
    """Regular files and folders only: a symlink in a submission could point anywhere on the grader."""
    target.mkdir(parents=True)
    for path in sorted(source.rglob("*")):
        if path.is_symlink():
            result.review.append(f"skipped the link {path.relative_to(source)} (links are not graded)")
        elif path.is_dir():
            (target / path.relative_to(source)).mkdir(parents=True, exist_ok=True)
        elif path.is_file():
            shutil.copy2(path, target / path.relative_to(source))


# What nbgrader's exchange puts beside a submission: its time, and the secret that names the student's feedback
# (release_feedback reads it from feedback/<student>/<lesson>/, where generate_feedback copies it from autograded/).
NBGRADER_FILES = ("timestamp.txt", "submission_secret.txt")


def _drop_unknown_files(staged, release_dir, result):
    """Keep the notebooks, nbgrader's own files and the release's own files. A student's zerolab/lesson/checks.py
    or json.py would otherwise be imported by the hidden tests instead of the real module."""
    allowed = {path.relative_to(release_dir) for path in release_dir.rglob("*")} if release_dir.is_dir() else set()
    for path in sorted(staged.iterdir()):
        name = path.relative_to(staged)
        if path.suffix == ".ipynb" or path.name in NBGRADER_FILES or name in allowed:
            continue
        python = path.suffix == ".py" or (path.is_dir() and any(path.rglob("*.py")))
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        if python:
            result.review.append(f"submitted Python code {path.name!r} that tests could import; it was not used")
        else:
            result.reasons.append(f"ignored the extra file {path.name!r}")


def _short(error):
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text[:120]
