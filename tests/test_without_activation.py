"""Everything works from `.venv/bin/...` with the venv not activated: PATH holds only the system folders.

The README's commands run `.venv/bin/python -m pytest`, `.venv/bin/zerolab grade`, `.venv/bin/zerolab run`
without `source .venv/bin/activate`, so nothing zerolab starts may be looked up by a bare name on PATH
(issue 8: `nbgrader` was, and a fresh machine failed 43 tests). Each test runs a real path through the code
with PATH reduced to the system folders, and a static scan keeps bare tool names out of every argv.
"""
import ast
import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from zerolab.grading.answers import with_solutions

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SYSTEM_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"
LESSON = "03_overlap_comm"  # the fastest lesson to execute
# Programs zerolab may start by name: system tools, never a Python package's script.
SYSTEM_TOOLS = {"sh", "bash", "ps", "bwrap", "sleep", "apt-get", "git", "sbatch", "scancel", "squeue",
                "useradd", "userdel", "runuser", "chown", "pkill"}


def bare_environment(**extra):
    env = {"HOME": os.environ.get("HOME", "/root"), "PATH": SYSTEM_PATH, "DS_ACCELERATOR": "cpu"}
    for name in ("TORCH_EXTENSIONS_DIR", "TMPDIR", "LANG"):
        if name in os.environ:
            env[name] = os.environ[name]
    return {**env, **extra}


def run_bare(argv, timeout, cwd=REPO):
    done = subprocess.run([str(a) for a in argv], cwd=cwd, env=bare_environment(), capture_output=True, text=True,
                          timeout=timeout)
    output = done.stdout + done.stderr
    assert "FileNotFoundError" not in output and "No such file or directory" not in output, output[-4000:]
    assert done.returncode == 0, output[-4000:]
    return done


def test_no_bare_python_tool_in_any_argv():
    """A list literal handed to subprocess starts with sys.executable or a system tool, never e.g. "nbgrader"."""
    offenders = []
    for folder in ("zerolab", "autograder", "scripts", "tests"):
        for path in (REPO / folder).rglob("*.py"):
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in {"run", "Popen", "call", "check_call", "check_output"}
                        and node.args and isinstance(node.args[0], ast.List) and node.args[0].elts):
                    continue
                first = node.args[0].elts[0]
                if isinstance(first, ast.Constant) and first.value not in SYSTEM_TOOLS:
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} starts {first.value!r} by name")
    assert not offenders, "use zerolab.base.interpreter.python_module(...) instead:\n" + "\n".join(offenders)


@pytest.mark.slow
def test_lesson_build_without_activation(tmp_path):
    """autograder/build.py releases (nbgrader generate_assignment) and executes a lesson with the bare PATH."""
    run_bare([sys.executable, "autograder/build.py", "--out", tmp_path, "--lesson", LESSON], timeout=600)
    assert (tmp_path / "lessons" / f"{LESSON}.ipynb").exists()
    assert (tmp_path / "solutions" / f"{LESSON}.ipynb").exists()


@pytest.mark.slow
def test_zerolab_grade_script_without_activation(tmp_path):
    """`.venv/bin/zerolab grade` of a one-student course, the venv not activated."""
    course = tmp_path / "course"
    source = REPO / "autograder" / "source" / LESSON / f"{LESSON}.ipynb"
    release = nbformat.read(str(REPO / "lessons" / f"{LESSON}.ipynb"), as_version=4)
    (course / "source" / LESSON).mkdir(parents=True)
    (course / "nbgrader_config.py").write_text((REPO / "autograder" / "nbgrader_config.py").read_text())
    (course / "source" / LESSON / source.name).write_text(source.read_text())
    submitted = course / "submitted" / "ada" / LESSON
    submitted.mkdir(parents=True)
    nbformat.write(with_solutions(release, nbformat.read(str(source), as_version=4)), str(submitted / source.name))
    run_bare([BIN / "zerolab", "grade", LESSON, "--course", course], timeout=600, cwd=tmp_path)
    with open(course / "grades.csv", newline="") as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["student"] == "ada" and row["status"] in {"graded", "review"}, row
    assert float(row["score"]) == float(row["max_score"]) > 0, row


@pytest.mark.slow
def test_zerolab_run_script_without_activation():
    """`.venv/bin/zerolab run`: two ranks find ninja (DeepSpeed's op builds run it by name) and train."""
    done = run_bare([BIN / "zerolab", "run", "--stage", "1", "--ranks", "2", "--steps", "1"], timeout=600)
    assert "step 1/1" in done.stdout + done.stderr


def test_ranks_find_the_ninja_next_to_this_interpreter():
    """DeepSpeed's op builder runs `ninja` by name: a rank's PATH leads with the interpreter's own bin folder."""
    import shutil

    from zerolab.base.interpreter import env_with_interpreter_bin

    env = env_with_interpreter_bin({"PATH": SYSTEM_PATH})
    assert env["PATH"].split(os.pathsep)[0] == str(BIN)
    assert shutil.which("ninja", path=env["PATH"]) == str(BIN / "ninja")
