"""A student's first hour in a real browser (issue 25): each lesson's release, opened in JupyterLab or Notebook 7
from a fresh copy and run with Run All before any exercise is answered.

- Run All reaches the end: every code cell ran, and the only errors are the exercises' own (their tests fail, as
  they must); a teaching cell that needs an answer printed one line instead.
- No answer is in sight: no output above an exercise, or right after it, shows its expected value or letter (the
  scan of tests/test_no_answers_in_sight.py, over the notebook the front-end saved, so over what the student saw).
- Long cells show progress while they run: lesson 08's rank cells print a line per rank as it starts, seen in
  the cell's output before the ranks end.

Every lesson runs in JupyterLab in English, except 06 and 09, whose real runs take minutes (tests/
test_no_answers_in_sight.py runs them in a kernel, both editions); 04, 05 and 08 also in Notebook 7 in Chinese, and
07 in the two other pairings, so that each front-end meets each edition.
"""
import json
import shutil

import nbformat
import pytest

from tests.browser_session import (browser,  # noqa: F401 (a fixture)
                                   ARTIFACTS, FRONT, NEEDS_CHROMIUM, ROOT, jupyter_lab, open_notebook,
                                   run_all, save, shut_down_kernels)
from tests.session_cache import run_cache
from tests.test_no_answers_in_sight import answers_in_sight, errors_outside_exercises, expected_answers, graded
from zerolab.lesson import course
from zerolab.base.i18n import translate

pytest.importorskip("playwright.sync_api", reason="pip install -r scripts/requirements-grading.txt")
pytestmark = NEEDS_CHROMIUM

# Lessons 06, 09 and 10 train real DeepSpeed ranks (10 also waits out a hang's timeout); their Run All is left to
# the kernel-level test (tests/test_no_answers_in_sight.py).
REAL_RUNS = {"06_predict_then_measure", "09_checkpoints", "10_zero_in_2026"}
LESSONS = sorted(p.stem for p in (ROOT / "autograder" / "src").glob("[0-9]*.py") if p.stem not in REAL_RUNS)
CASES = ([("jupyterlab", "en", name) for name in LESSONS]
         + [("notebook7", "zh", name) for name in ("04_writing_the_config", "05_config_doctor", "08_zero_from_scratch")]
         + [("jupyterlab", "zh", "07_interview_drill"), ("notebook7", "en", "07_interview_drill")])
RANK_CELLS = {"08_zero_from_scratch"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("first-hour")
    with jupyter_lab(root, run_cache(tmp_path_factory)) as url:  # lesson 08's teaching runs: once a session
        yield url, root


def progress_while_running(language):
    """A check for run_all: some cell's output shows its ranks' start lines and nothing else yet, so the student
    sees the ranks at work before they end. (Its prompt may read [ ] rather than [*]: once a test has failed, as an
    unanswered test does, JupyterLab and Notebook 7 reset the prompts of the cells still queued, although the kernel
    runs them; the output is what shows the cell is alive.)"""
    starts = [translate(f"rank {rank} of 2: started", language) for rank in range(2)]
    script = f"""() => [...document.querySelectorAll('{FRONT} .jp-CodeCell .jp-OutputArea')].some(area => {{
        const lines = area.textContent.split('\\n').filter(line => line.trim());
        return lines.length && lines[0] === {json.dumps(starts[0])}
            && lines.every(line => {json.dumps(starts)}.includes(line));
    }})"""

    def check(page):
        page.wait_for_function(script, timeout=300_000, polling=100)
    return check


@pytest.mark.parametrize("front_end,language,name", CASES)
def test_run_all_of_an_unanswered_release_in_the_browser(lab, browser, front_end, language, name, tmp_path):
    url, root = lab
    folder = root / f"{front_end}-{language}"
    folder.mkdir(exist_ok=True)
    copy = folder / f"{name}.ipynb"
    shutil.copy(ROOT / course.edition_path("lessons", name, language), copy)
    prefix = "lab/tree" if front_end == "jupyterlab" else "notebooks"
    page, _ = open_notebook(browser, url, f"{prefix}/{folder.name}/{name}.ipynb")
    watch = progress_while_running(language) if name in RANK_CELLS else None
    run_all(page, f"{front_end}-{language}-{name}", while_running=watch)
    page.screenshot(path=str(ARTIFACTS / f"first-hour-{front_end}-{language}-{name}.png"))
    save(page, copy)
    page.close()
    shut_down_kernels(url)

    nb = nbformat.read(str(copy), as_version=4)
    unrun = [i for i, cell in enumerate(nb.cells) if cell.cell_type == "code" and not cell.execution_count]
    assert not unrun, f"Run All never reached cells {unrun}"
    assert not errors_outside_exercises(nb), f"teaching cells raised without answers: {errors_outside_exercises(nb)}"
    assert any(out.output_type == "error" for cell in nb.cells if graded(cell) for out in cell.outputs) \
        or not any(graded(cell) for cell in nb.cells), "an unanswered release's tests should fail"
    shown = answers_in_sight(nb, expected_answers(name, tmp_path / "solution"))
    assert not shown, f"answers in outputs before they are answered: {shown}"
