"""Every lesson on a fresh Colab runtime, and on ModelScope, simulated: the setup cell must install what it needs.

One new virtual environment per test session holds only what Colab preinstalls (torch, numpy, matplotlib,
ipywidgets, ipykernel: no zerolab, no deepspeed). Its kernel sees a stand-in `google.colab` module and a
stand-in /content (the folder named by ZEROLAB_COLAB_CONTENT, which the setup cell honours), and installs zerolab
from a local clone of this repository (ZEROLAB_INSTALL_URL, a file:// URL). Each lesson's release, filled with the solutions, then runs
top to bottom in that kernel, and torch and numpy must be the very same installs afterwards. zerolab is uninstalled before each
lesson, so every setup cell really installs it. The real runs and measurements of the teaching cells (in
every lesson whose source reads NBGRADER_EXECUTION) are skipped, as while grading, unless ZEROLAB_HOSTED_RUNS=1: the
point here is the setup cell, tests/test_notebooks.py and tests/test_lesson09.py run those cells, and in a new
environment they would compile DeepSpeed's ops again, minutes on 2 cores. Test cells that start ranks still run.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "autograder"))
import build  # noqa: E402

from zerolab.grading.answers import with_solutions  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# Lessons with teaching cells that skip their real runs while nbgrader grades (the NBGRADER_EXECUTION switch).
REAL_RUNS = {name for name in build.lesson_names()
             if "NBGRADER_EXECUTION" in (ROOT / "autograder" / "src" / f"{name}.py").read_text()}
COLAB_PREINSTALLED = ["torch==2.13.0", "numpy", "matplotlib", "ipywidgets", "ipykernel"]
pytestmark = pytest.mark.slow

COLAB_STUB = '''
import os


def enable_custom_widget_manager():
    with open(os.environ["ZEROLAB_TEST_MARKER"], "a") as marker:
        marker.write("enable_custom_widget_manager\\n")
'''


def run(argv, **options):
    done = subprocess.run(argv, capture_output=True, text=True, **options)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


@pytest.fixture(scope="session")
def hosted(tmp_path_factory):
    """The fresh runtime: venv, google.colab stand-in, /content stand-in, a clone to install from."""
    base = tmp_path_factory.mktemp("hosted")
    venv = base / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    python = venv / "bin" / "python"
    run([str(python), "-m", "pip", "install", "-q", *COLAB_PREINSTALLED], timeout=900)
    stubs = base / "stubs" / "google" / "colab"  # google is a namespace package on Colab too
    stubs.mkdir(parents=True)
    (stubs / "__init__.py").write_text("")
    (stubs / "output.py").write_text(COLAB_STUB)
    clone = base / "clone"
    run(["git", "clone", "-q", str(ROOT), str(clone)])
    kernels = base / "share" / "jupyter" / "kernels" / "hosted"
    kernels.mkdir(parents=True)
    (base / "content").mkdir()
    return {"base": base, "python": python, "stubs": base / "stubs", "clone": clone, "kernels": kernels,
            "content": base / "content"}


def installed(python, package):
    """Version and location of a package in the hosted venv (what the setup cell must not replace)."""
    return run([str(python), "-c", f"import {package}, json; print(json.dumps([{package}.__version__, {package}.__file__]))"])


def execute(hosted, name, where, monkeypatch):
    python = hosted["python"]
    subprocess.run([str(python), "-m", "pip", "uninstall", "-y", "-q", "zerolab"], capture_output=True)
    marker = hosted["base"] / f"{name}-{where}.marker"
    # A file:// URL: the pip Python 3.11 ships (23.x) refuses git+file:/// requirements.
    env = {"ZEROLAB_INSTALL_URL": f"file://{hosted['clone']}", "ZEROLAB_TEST_MARKER": str(marker),
           "ZEROLAB_STATIC": "1", "DS_ACCELERATOR": "cpu", "PATH": f"{python.parent}:{os.environ['PATH']}",
           "ZEROLAB_COLAB_CONTENT": str(hosted["content"] if where == "Colab" else hosted["base"] / "no-content")}
    if where == "Colab":
        env["PYTHONPATH"] = str(hosted["stubs"])
    else:
        env["MODELSCOPE_ENVIRONMENT"] = "notebook"  # ModelScope's notebook instances set MODELSCOPE_* variables
    if name in REAL_RUNS and not os.environ.get("ZEROLAB_HOSTED_RUNS"):
        env["NBGRADER_EXECUTION"] = "autograde"
    (hosted["kernels"] / "kernel.json").write_text(json.dumps(
        {"argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"], "display_name": "hosted",
         "language": "python", "env": env}))
    monkeypatch.setenv("JUPYTER_PATH", str(hosted["base"] / "share" / "jupyter"))
    from nbclient import NotebookClient

    # What a student with every answer right runs there: the release, its exercises filled with the solutions.
    nb = with_solutions(nbformat.read(str(ROOT / "lessons" / f"{name}.ipynb"), as_version=4), build.source_notebook(name))
    NotebookClient(nb, timeout=900, kernel_name="hosted", resources={"metadata": {"path": str(hosted["content"])}}
                   ).execute()
    errors = [f"{cell.id}: {out.ename}: {out.evalue}" for cell in nb.cells for out in cell.get("outputs", [])
              if out.output_type == "error"]
    assert errors == [], f"{name} on {where}: {errors}"
    setup_text = "".join(out.get("text", "") for out in nb.cells[2].outputs)
    return setup_text, marker


@pytest.mark.parametrize("name", build.lesson_names())
def test_lesson_sets_itself_up_on_a_fresh_colab_runtime(hosted, name, monkeypatch):
    before = {package: installed(hosted["python"], package) for package in ("torch", "numpy")}
    setup_text, marker = execute(hosted, name, "Colab", monkeypatch)
    assert f"zerolab setup (Colab): installing zerolab @ file://{hosted['clone']}" in setup_text, setup_text
    assert "ready on Colab" in setup_text
    assert marker.read_text() == "enable_custom_widget_manager\n", "Colab needs its custom widget manager for ipywidgets 8"
    for package in ("torch", "numpy"):
        assert installed(hosted["python"], package) == before[package], f"the setup cell replaced {package}"


def test_a_lesson_sets_itself_up_on_modelscope(hosted, monkeypatch):
    setup_text, marker = execute(hosted, "04_writing_the_config", "ModelScope", monkeypatch)
    assert "zerolab setup (ModelScope): installing zerolab" in setup_text and "ready on ModelScope" in setup_text
    assert not marker.exists(), "Colab's widget manager is Colab's alone"


def test_an_unpublished_copy_says_so_in_one_line_and_installs_nothing(tmp_path, monkeypatch):
    """A copy without a published repository (zerolab/lesson/course.py REPO unset, no GitHub origin) opened on ModelScope:
    zerolab cannot be installed from anywhere, and the setup cell says so in one line instead of failing in pip."""
    from zerolab.lesson import course

    monkeypatch.setattr(course, "REPO", None)
    source = build.setup_cell_source("01_where_memory_goes")
    assert "INSTALL_URL = None" in source.splitlines()
    # -S: no site-packages, so zerolab is not importable, as on a fresh runtime; cwd: not the repository's zerolab/
    done = subprocess.run([sys.executable, "-S", "-c", source], capture_output=True, text=True, cwd=tmp_path,
                          env={"PATH": os.environ["PATH"], "MODELSCOPE_ENVIRONMENT": "notebook"}, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and "not published" in lines[0] and "ModelScope" in lines[0], lines
    assert "installing" not in done.stdout and not done.stderr
