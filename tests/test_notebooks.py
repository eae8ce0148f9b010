"""Every executed solution runs top to bottom in a fresh, real python3 kernel on CPU, without errors.

Widgets run their interactive path here (ZEROLAB_STATIC is not set), the build ran their static one. The teaching
cells' real runs share the session's run cache (tests/session_cache.py): what another execution of the lesson ran
already (its other edition, its release) is copied, not run again.
"""
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from session_cache import run_cache
from zerolab.base.interpreter import poll_shell_in_slices

ROOT = Path(__file__).resolve().parent.parent
# Lesson 09's solution runs top to bottom in tests/test_lesson09.py (the same kernel and environment, and more
# checks): its real DeepSpeed runs take minutes of CPU, so this module does not run them a second time.
RUN_ELSEWHERE = {"09_checkpoints": "tests/test_lesson09.py"}
LESSONS = sorted(p.stem for p in (ROOT / "autograder" / "src").glob("*.py")
                 if not p.name.startswith("_") and p.stem not in RUN_ELSEWHERE)


@pytest.mark.slow
@pytest.mark.parametrize("name", LESSONS)
def test_solution_executes_in_a_fresh_kernel(name, tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ZEROLAB_RUN_CACHE", str(run_cache(tmp_path_factory)))
    monkeypatch.delenv("ZEROLAB_STATIC", raising=False)
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    nb = nbformat.read(str(ROOT / "solutions" / f"{name}.ipynb"), as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.on_notebook_start = poll_shell_in_slices(client)  # else a missed reply can cost the whole 300 s
    client.execute()  # raises CellExecutionError naming the cell on the first error
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
