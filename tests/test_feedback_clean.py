"""The feedback file a student receives: the message, the cell and the line of their own code; never a hidden
test's source or marker, never the grading machine's paths or the grader's own frames (nbgrader issues #917, #1363).

Wrong submissions of lessons 01 (both editions) and 02 are graded for real with `zerolab grade --feedback` in a
temporary course (the sandbox when this machine has it), and each feedback HTML is checked against what nbgrader recorded of the
same run in the autograded notebook: every error there must reach the student (its message, the frames of the
notebook's cells), and nothing of the grader may. The submissions cover a hidden test failing inside
zerolab/lesson/checks.py, a hidden test calling the student's function that raises, errors inside the standard library
and numpy, a path of the grading folder in a message, and a cell printing the kernel's input history (which holds
the hidden tests once they ran); test_the_cases_are_covered fails when a lesson change stops covering one.
"""
import html
import os
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

import nbformat
import pytest

from tests.submissions.corpus import CAPS
from zerolab.grading import feedback
from zerolab.grading.answers import with_answers
from zerolab.base.i18n import translate

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow
STUDENTS = {"mixed_mistakes": "en", "zh_mixed_mistakes": "zh"}  # the Chinese edition: lesson 01 only
CASES = [("01_where_memory_goes", "mixed_mistakes"), ("01_where_memory_goes", "zh_mixed_mistakes"),
         ("02_offload", "mixed_mistakes")]

ANSWERS = {
    "01_where_memory_goes": {
        # right for the visible test's 1000 parameters, elements instead of bytes beyond: a hidden test fails in
        # zerolab.lesson.checks.close_to
        "ex1_model_state_bytes": "def model_state_bytes(params):\n    size = 1 if params > 10_000 else 2\n"
                                 "    return {'params': size * params, 'grads': size * params,\n"
                                 "            'master_weights': 2 * size * params,\n"
                                 "            'optimizer_states': 4 * size * params}\n",
        # fails inside the standard library (statistics.py)
        "ex2_per_gpu_bytes": "import statistics\n\ndef per_gpu_bytes(params, stage, gpus):\n"
                             "    return statistics.mean([])\n",
        # right on 8, 64 and 1024 GPUs; the hidden test's other GPU counts divide by zero in the student's line
        "ex3_fraction_kept": "def fraction_kept(stage, gpus):\n"
                             "    kept = (2 / gpus if stage >= 3 else 2) + (2 / gpus if stage >= 2 else 2) \\\n"
                             "        + (12 / gpus if stage >= 1 else 12)\n"
                             "    check = 1 / (gpus - gpus) if gpus not in (1, 8, 64, 1024) else 0\n"
                             "    return kept / 16\n",
        # a message holding the grading folder's path
        "ex4_deepspeed_zero2_gib": "import os\n\ndef deepspeed_zero2_gib(params, gpus):\n"
                                   "    return float(open(os.path.abspath('sizes-of-13b.csv')).read())\n",
    },
    "02_offload": {
        # right on 1, 4 and 8 GPUs, wrong on 3: a hidden test's own assert fails
        "ex1_offload_split": "def offload_split(params, gpus):\n    share = gpus if gpus != 3 else 2\n"
                             "    return {'gpu': 2 * params, 'host': 14 * params / share * gpus}\n",
        # fails inside numpy (site-packages)
        "ex4_pcie_seconds": "import numpy as np\n\ndef pcie_seconds(params, gpus, grad_accum, link):\n"
                            "    return float(np.linalg.inv(np.zeros((2, 2)))[0, 0])\n",
    },
}
# added at the end of each notebook: a student's own cell printing paths and the kernel's input history
PRINTS = "import os, zerolab\nprint(zerolab.__file__)\nprint(os.getcwd())\nprint('\\n'.join(In))\n"


def zerolab_grade(*args):
    return subprocess.run([sys.executable, "-m", "zerolab", "grade", *map(str, args)], capture_output=True,
                          text=True, timeout=900)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The course folder and {(lesson, student): (feedback html, autograded notebook, release, source notebook)}."""
    course = tmp_path_factory.mktemp("feedback") / "course"
    course.mkdir()
    shutil.copy(ROOT / "autograder" / "nbgrader_config.py", course / "nbgrader_config.py")
    with open(course / "nbgrader_config.py", "a") as config:
        config.writelines(f"c.ZeroLab.{key} = {value!r}\n" for key, value in CAPS.items())
    results = {}
    for lesson, answers in ANSWERS.items():
        shutil.copytree(ROOT / "autograder" / "source" / lesson, course / "source" / lesson)
        first = zerolab_grade(lesson, "--course", course, "--student", "nobody")  # generate_assignment only
        assert first.returncode == 0, first.stdout + first.stderr
        students = [student for name, student in CASES if name == lesson]
        releases = {"en": course / "release" / lesson / f"{lesson}.ipynb",
                    "zh": ROOT / "lessons" / "zh" / f"{lesson}.ipynb"}
        for student in students:
            release = nbformat.read(releases[STUDENTS[student]], as_version=4)
            submission = with_answers(release, answers)
            submission.cells.append(nbformat.v4.new_code_cell(PRINTS))
            folder = course / "submitted" / student / lesson
            folder.mkdir(parents=True)
            nbformat.write(submission, folder / f"{lesson}.ipynb")
        done = zerolab_grade(lesson, "--course", course, "--feedback", "--jobs", len(students))
        assert done.returncode == 0 and "no feedback" not in done.stdout, done.stdout + done.stderr
        source = nbformat.read(course / "source" / lesson / f"{lesson}.ipynb", as_version=4)
        for student in students:
            results[lesson, student] = (
                (course / "feedback" / student / lesson / f"{lesson}.html").read_text(),
                nbformat.read(course / "autograded" / student / lesson / f"{lesson}.ipynb", as_version=4),
                nbformat.read(releases[STUDENTS[student]], as_version=4), source)
    return course, results


def text_of(page):
    """What the browser shows of a feedback page: its text, without styles and scripts."""
    body = re.sub(r"<(style|script)\b.*?</\1>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", "", body))


def plain(entry):
    return feedback.ANSI.sub("", entry)


def errors(nb):
    """(cell, error output) of every error nbgrader recorded in the autograded notebook."""
    return [(cell, out) for cell in nb.cells if cell.cell_type == "code"
            for out in cell.get("outputs", []) if out.output_type == "error"]


def cell_frames(out):
    """(execution count, line) of each frame of an error in a notebook cell, outermost first."""
    frames = []
    for entry in out.traceback:
        found = feedback.CELL_FRAME.match(plain(entry).lstrip("\n").split("\n", 1)[0])
        if found:
            frames.append((int(found.group(1) or found.group(2)), int(found.group(3))))
    return frames


def hidden_source(nb):
    """Every line of a hidden-test region of the source notebook, markers included."""
    return [line for cell in nb.cells for number, line in enumerate(cell.source.split("\n"), 1)
            if number in feedback.hidden_line_numbers(cell.source)]


def grader_paths(course):
    import zerolab

    return sorted({str(course), str(course.resolve()), str(Path(zerolab.__file__).resolve().parent.parent),
                   sys.prefix, sys.base_prefix, sysconfig.get_paths()["stdlib"],
                   os.path.join(tempfile.gettempdir(), "zlg"), *site.getsitepackages()})


def test_the_cases_are_covered(graded):
    """The submissions still make the failures this file is about; a lesson change may need new answers here."""
    _, results = graded
    raised_in_checks = hidden_failures = library_frames = paths_in_messages = students_lines = 0
    for (lesson, student), (_, autograded, _, _) in results.items():
        by_count = {cell.execution_count: cell for cell in autograded.cells if cell.cell_type == "code"}
        for cell, out in errors(autograded):
            text = "\n".join(plain(entry) for entry in out.traceback)
            raised_in_checks += "zerolab/lesson/checks.py" in text
            library_frames += bool(re.search(r"(statistics|numpy).*\.py:\d+", text))
            paths_in_messages += f"{student}/{lesson}" in out.evalue
            for count, line in cell_frames(out):
                hidden_failures += line in feedback.hidden_line_numbers(by_count[count].source)
                students_lines += by_count[count].metadata.get("nbgrader", {}).get("solution", False)
    assert raised_in_checks and hidden_failures >= 2 and library_frames >= 2 and paths_in_messages \
        and students_lines >= 4, (raised_in_checks, hidden_failures, library_frames, paths_in_messages, students_lines)


@pytest.mark.parametrize("lesson, student", CASES)
def test_no_hidden_test_source_or_marker(graded, lesson, student):
    page, _, release, source = graded[1][lesson, student]
    shown = text_of(page)
    assert "BEGIN HIDDEN" not in page and "END HIDDEN" not in page
    visible = {line.strip() for cell in release.cells for line in cell.source.split("\n")}
    leaked = [line for line in hidden_source(source)
              if len(line.strip()) >= 12 and line.strip() not in visible and line.strip() in shown]
    assert not leaked, f"{lesson}: hidden test source in the feedback: {leaked[:3]}"


@pytest.mark.parametrize("lesson, student", CASES)
def test_no_grader_paths_or_frames(graded, lesson, student):
    course, results = graded
    page = results[lesson, student][0]
    for path in grader_paths(course):
        assert path not in page, f"{lesson}: the grading machine's path {path} is in the feedback"
    shown = text_of(page)
    assert not re.search(r"^\s*File \S+:\d+", shown, re.M), "a frame in a file (the grader's or a library's)"
    assert "checks.py" not in shown and "def close_to" not in shown, "zerolab.lesson.checks' source or path"


@pytest.mark.parametrize("lesson, student", CASES)
def test_every_error_shows_its_message_and_the_students_line(graded, lesson, student):
    course, results = graded
    page, autograded, _, _ = results[lesson, student]
    shown = text_of(page)
    by_count = {cell.execution_count: cell for cell in autograded.cells if cell.cell_type == "code"}
    folder = str(course / "autograded" / student / lesson) + "/"
    for cell, out in errors(autograded):
        message = f"{out.ename}: {out.evalue.replace(folder, '')}"  # the student's folder: a path relative to it
        assert message in shown, f"{lesson}: the feedback lacks the message {message!r}"
        for count, line in cell_frames(out):
            frame = by_count[count]
            if line in feedback.hidden_line_numbers(frame.source):
                assert translate(f"Cell In[{count}], in a hidden test (its source is not shown)", STUDENTS[student]) \
                    in shown
                continue
            assert f"Cell In[{count}], line {line}" in shown, f"{lesson}: the frame of cell {count} is missing"
            code = frame.source.split("\n")[line - 1].strip()
            assert re.search(rf"{line} +{re.escape(code)}", shown), f"{lesson}: line {line} of cell {count}: {code}"


@pytest.mark.parametrize("lesson, student", CASES)
def test_visible_tests_and_their_results_are_kept(graded, lesson, student):
    page, autograded, release, _ = graded[1][lesson, student]
    shown = text_of(page)
    tests = [cell for cell in release.cells if cell.metadata.get("nbgrader", {}).get("grade") and
             cell.cell_type == "code"]
    assert tests
    for cell in tests:
        for line in cell.source.split("\n"):
            assert line.strip() in shown, f"{lesson}: visible test line {line!r} is not in the feedback"
    assert shown.count("Score:") >= len(tests)
    printed = "".join(out.get("text", "") for cell in autograded.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []) if out.output_type == "stream")
    assert "ZeRO" in printed and any(line in shown for line in printed.split("\n") if "ZeRO" in line), \
        "the lesson's own printed results"


def test_module_names_never_paths():
    stdlib = sysconfig.get_paths()["stdlib"]
    assert feedback.module_of(f"{stdlib}/statistics.py") == "statistics"
    assert feedback.module_of("/opt/venv/lib/python3.11/site-packages/torch/nn/functional.py") == "torch.nn.functional"
    assert feedback.module_of("/opt/venv/lib/python3.11/site-packages/numpy/__init__.py") == "numpy"
    assert feedback.module_of("<frozen importlib._bootstrap>") == "importlib._bootstrap"


def test_paths_are_shortened_only_at_a_path_boundary():
    paths = feedback.Paths({"/srv/course": "<course>", "/srv/course/autograded/ann/01": "", "/opt/py": "<python>"})
    text = ("No such file: '/srv/course/autograded/ann/01/data.csv' in /srv/course/autograded/ann/01; "
            "/srv/course2/x and /srv/course/gradebook.db, /opt/py/bin/python")
    assert paths.shorten(text) == ("No such file: 'data.csv' in .; /srv/course2/x and <course>/gradebook.db, "
                                   "<python>/bin/python")


def test_a_traceback_keeps_cell_frames_minus_hidden_lines():
    traceback = [
        "\x1b[31m----\x1b[39m", "AssertionError   Traceback (most recent call last)",
        "Cell In[6], line 3\n      2 x = 1\n----> 3 check(f(1))\n"
        "      4 ### BEGIN HIDDEN TESTS\n      5 check(f(99))\n",
        "File /opt/repo/zerolab/lesson/checks.py:113, in close_to(got, want)\n--> 113 raise AssertionError(secret)\n",
        "Cell In[7], line 5\n      4 ### BEGIN HIDDEN TESTS\n----> 5 check(f(99))\n",
        "Cell In[5], line 2, in f(x)\n      1 def f(x):\n----> 2     return statistics.mean([])\n",
        "File /usr/lib/python3.11/statistics.py:430, in mean(data)\n    429 if n < 1:\n--> 430     raise E\n",
        "StatisticsError: mean requires at least one data point",
    ]
    hidden = {6: {4, 5, 6}, 7: {4, 5, 6}, 5: set()}
    cleaned = "\n".join(feedback.clean_traceback(traceback, hidden, feedback.Paths({})))
    assert "check(f(1))" in cleaned and "x = 1" in cleaned and "return statistics.mean([])" in cleaned
    assert "f(99)" not in cleaned and "HIDDEN" not in cleaned and "checks.py" not in cleaned
    assert "Cell In[7], in a hidden test" in cleaned and "secret" not in cleaned and "/usr/lib" not in cleaned
    assert "inside statistics (library code" in cleaned and "zerolab" not in cleaned
    assert cleaned.endswith("StatisticsError: mean requires at least one data point")


def test_what_stands_in_for_hidden_source_is_in_the_notebooks_language():
    traceback = ["Cell In[7], line 5\n----> 5 check(f(99))\n", "File /usr/lib/python3.11/json/decoder.py:3\n",
                 "Cell In[8], line 2\n----> 2 check(g(99))  # a long hidden line\n", "JSONDecodeError: x"]
    cleaned = "\n".join(feedback.clean_traceback(traceback, {7: {5}}, feedback.Paths({}),
                                                 hidden_text=["check(g(99))  # a long hidden line"], lang="zh"))
    assert "Cell In[7]，在一个隐藏测试中" in cleaned and "在 json.decoder 内部（库代码" in cleaned
    assert "（隐藏测试的一行）" in cleaned and "g(99)" not in cleaned and "f(99)" not in cleaned
