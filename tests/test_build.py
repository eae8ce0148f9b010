"""The generated notebooks are what autograder/build.py makes from autograder/src today (fastbook/nbdev style).

Rebuilds every lesson into a temporary folder (without executing) and compares with the committed files:
autograder/source/ and lessons/ must be identical; solutions/ must have the same cells as the fresh source
notebook and carry its source hash (its outputs hold timings, so they are not compared byte for byte).
"""
import json
import re
import sys
from pathlib import Path

import jupytext
import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
import build  # noqa: E402

from zerolab.lesson import course  # noqa: E402

LESSONS = build.lesson_names()
REBUILD = "run `python autograder/build.py` and commit the generated files"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    build.build(LESSONS, out, execute=False, log=lambda *args: None)
    return out


def load(path):
    return json.loads(path.read_text())


def test_there_are_lessons():
    assert LESSONS, "no lesson sources found in autograder/src"
    known = {lesson.name for lesson in course.LESSONS}
    assert set(LESSONS) <= known, f"add {sorted(set(LESSONS) - known)} to zerolab/lesson/course.py LESSONS"


def test_readme_lesson_map_is_fresh(fresh):
    assert (ROOT / "README.md").read_text() == (fresh / "README.md").read_text(), f"README.md's lesson map: {REBUILD}"
    assert (ROOT / "README.zh.md").read_text() == (fresh / "README.zh.md").read_text(), \
        f"README.zh.md's lesson map: {REBUILD}"
    for lesson in course.LESSONS:
        assert f"({course.lesson_path(lesson.name, 'zh')})" in (ROOT / "README.md").read_text()
        assert f"[{lesson.title_zh}]({course.lesson_path(lesson.name, 'zh')})" in (ROOT / "README.zh.md").read_text()
    lesson_map = (ROOT / "README.md").read_text().split(build.README_MAP[0])[1].split(build.README_MAP[1])[0]
    for lesson in course.LESSONS:
        if course.published():
            assert course.colab_url(lesson.name) in lesson_map
    assert course.published() or "colab.research.google.com" not in lesson_map, "no badges until published"


@pytest.mark.parametrize("name", LESSONS)
def test_instructor_notebook_is_fresh(fresh, name):
    relative = Path("autograder", "source", name, f"{name}.ipynb")
    assert (ROOT / relative).exists(), f"{relative} is missing: {REBUILD}"
    assert load(ROOT / relative) == load(fresh / relative), f"{relative} is stale: {REBUILD}"


EDITIONS = [(name, language) for language in course.LANGUAGES for name in LESSONS]


@pytest.mark.parametrize("name, language", EDITIONS)
def test_release_is_fresh(fresh, name, language):
    relative = Path(course.edition_path("lessons", name, language))
    assert (ROOT / relative).exists(), f"{relative} is missing: {REBUILD}"
    assert load(ROOT / relative) == load(fresh / relative), f"{relative} is stale: {REBUILD}"


@pytest.mark.parametrize("name, language", EDITIONS)
def test_solution_was_executed_from_the_current_source(fresh, name, language):
    path = ROOT / course.edition_path("solutions", name, language)
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: {REBUILD}"
    solution = nbformat.read(str(path), as_version=4)
    source = build.source_notebook(name, language)
    assert [c.source for c in solution.cells] == [c.source for c in source.cells], f"solutions/{name} is stale: {REBUILD}"
    assert solution.metadata["zerolab"]["source_sha256"] == build.source_hash(source), f"solutions/{name} is stale"
    code = [cell for cell in solution.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code), f"solutions/{name} has cells that were not executed"
    errors = [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert not errors, f"solutions/{name} holds an error output: {errors[0].get('ename')}"
    if "zerolab.lesson.widgets" in (ROOT / "autograder" / "src" / f"{name}.py").read_text():
        figures = [o for cell in code for o in cell.outputs if "image/png" in o.get("data", {})]
        assert figures, f"solutions/{name} shows no figure: a widget's static fallback should draw one"


def test_no_generated_notebook_without_a_source():
    found = {p.stem for p in (ROOT / "lessons").glob("*.ipynb")} | {p.stem for p in (ROOT / "lessons/zh").glob("*.ipynb")}
    found |= {p.stem for p in (ROOT / "solutions").glob("**/*.ipynb")}
    found |= {p.name for p in (ROOT / "autograder" / "source").glob("*") if p.is_dir()}
    assert found <= set(LESSONS), f"generated notebooks without a source in autograder/src: {sorted(found - set(LESSONS))}"


@pytest.mark.parametrize("name", LESSONS)
def test_release_hides_solutions_and_links_to_itself(name):
    text = (ROOT / "lessons" / f"{name}.ipynb").read_text()
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "<!-- claim:"):
        assert marker not in text, f"lessons/{name}.ipynb still contains {marker}"
    assert "raise NotImplementedError()" in text
    release = nbformat.read(str(ROOT / "lessons" / f"{name}.ipynb"), as_version=4)
    badge, setup = release.cells[1], release.cells[2]
    if course.published():
        assert course.colab_url(name) in badge.source and course.modelscope_url(name) in badge.source
    else:  # no instructor note: how to publish is in the README's instructor guide
        assert "colab.research.google.com" not in badge.source and "setup cell" in badge.source
        assert not any(word in badge.source for word in ("REPO", "course.py", "build.py", "publish")), badge.source
    assert setup.metadata["nbgrader"]["grade_id"] == "setup"
    assert f"INSTALL_URL = {course.install_url()!r}" in setup.source.splitlines()  # None while unpublished
    assert setup.metadata["jupyter"]["source_hidden"], "the setup cell is folded"
    assert release.metadata["kernelspec"]["name"] == "python3" and release.metadata["language_info"]["name"] == "python"
    for cell in release.cells:
        graded = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and (graded.get("solution") or graded.get("grade")):
            assert "raises-exception" in cell.metadata.get("tags", []), f"{cell.id}: Run All must go on past it"


def test_badges_open_each_lesson_on_colab_and_modelscope_only_once_published(monkeypatch):
    name = course.LESSONS[0].name
    assert course.published() or build.badge_cell_source(name).count("](http") == 0
    monkeypatch.setattr(course, "REPO", "https://github.com/someone/zero-lab")
    badge = build.badge_cell_source(name)
    # The link formats both services document: Colab's /github/ path and ModelScope's notebook/share/github.
    assert f"https://colab.research.google.com/github/someone/zero-lab/blob/main/lessons/{name}.ipynb" in badge
    assert f"https://modelscope.cn/notebook/share/github/someone/zero-lab/blob/main/lessons/{name}.ipynb" in badge
    assert "https://mybinder.org/v2/gh/someone/zero-lab/main" in course.lesson_map()


def check(text):
    build.check_source(jupytext.reads(text, fmt="py:percent"), "x.py")


EXERCISE = '# %% nbgrader={"grade": false, "grade_id": "ex1_a", "locked": false, "schema_version": 3, "solution": true, "task": false}\n' \
           "def a():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION\n"
TEST = '# %% nbgrader={"grade": true, "grade_id": "test_ex1_a", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}\n' \
       "assert a() == 1\n"


def test_a_well_formed_source_passes_the_checks():
    check("# %% [markdown]\n# # Lesson 99: t\n\n" + EXERCISE + "\n" + TEST)


@pytest.mark.parametrize("text, message", [
    ("# %%\nx = 1\n", "first cell must be a markdown cell with the title"),
    ("# %% [markdown]\n# # T\n\n" + EXERCISE, "must be followed at once by its locked test cell 'test_ex1_a'"),
    ("# %% [markdown]\n# # T\n\n" + EXERCISE + "\n# %%\nx = 1\n\n" + TEST, "must be followed at once"),
    ("# %% [markdown]\n# # T\n\n" + EXERCISE.replace("### BEGIN SOLUTION\n", "") + "\n" + TEST, "### BEGIN SOLUTION"),
    ("# %% [markdown]\n# # T\n\n" + EXERCISE + "\n" + TEST.replace('"points": 1, ', ""), "lacks points"),
    ("# %% [markdown]\n# # T\n\n" + EXERCISE.replace('"schema_version": 3, ', "") + "\n" + TEST, "lacks schema_version"),
    ("# %% [markdown]\n# # T\n\n" + EXERCISE + "\n" + TEST + "\n" + TEST, "used twice"),
])
def test_malformed_sources_are_reported_by_cell(text, message):
    with pytest.raises(build.BuildError, match="x.py, cell|x.py:") as error:
        check(text)
    assert message in str(error.value)


@pytest.mark.parametrize("name", [lesson.name for lesson in course.LESSONS])
def test_a_lesson_that_reaches_deepspeed_installs_it_on_colab(name):
    """Colab and ModelScope have no DeepSpeed: a lesson whose cells import it, or import a zerolab part built on it
    (the config doctor, real runs, checkpoints, lesson 08's harness; zerolab.run's model and blocks are torch
    alone), must list it in zerolab/lesson/course.py so its setup cell installs it. Hidden tests run only where the
    instructor grades, which has DeepSpeed."""
    source = (ROOT / "autograder" / "src" / f"{name}.py").read_text(encoding="utf-8")
    shown = re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", "", source, flags=re.S)
    reaches = re.search(r"^\s*(from|import) (deepspeed|zerolab\.(config|ckpt|handmade)|zerolab\.run(?!\.(model|blocks)\b))\b",
                        shown, re.M)
    if reaches:
        assert "deepspeed" in course.lesson(name).needs, f"{name}: {reaches.group(0).strip()} needs DeepSpeed"
