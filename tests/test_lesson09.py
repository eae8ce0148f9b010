"""Lesson 09 starts real DeepSpeed ranks and writes checkpoints: run its solution top to bottom with the kernel's
temporary folder pointed at an empty one, then check that nothing is left there and no rank outlived it.
This is also lesson 09's run of tests/test_notebooks.py (RUN_ELSEWHERE there): same kernel, same environment, and
any error in a cell fails it."""
import os
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from leftovers import orphaned
from session_cache import run_cache
from zerolab.base.interpreter import poll_shell_in_slices

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def test_lesson09_leaves_no_file_and_no_process(tmp_path, tmp_path_factory, monkeypatch):
    monkeypatch.setenv("ZEROLAB_RUN_CACHE", str(run_cache(tmp_path_factory)))  # the three saves: once a session
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # tempfile in the kernel and in every rank it starts
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("ZEROLAB_STATIC", raising=False)  # as tests/test_notebooks.py runs the solutions
    nb = nbformat.read(str(ROOT / "solutions" / "09_checkpoints.ipynb"), as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.on_notebook_start = poll_shell_in_slices(client)
    started = time.perf_counter()
    client.execute()  # raises CellExecutionError naming the cell on the first error
    print(f"lesson 09 executed in {time.perf_counter() - started:.1f} s")  # -s shows it; no timed assert
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "every weight equal to what the ranks trained: True" in outputs
    assert "DP world size of 2 but the current world size is 3" in outputs
    left = [name for name in os.listdir(scratch) if name.startswith("zerolab-")]
    assert left == [], f"lesson 09 left these behind in its temporary folder: {left}"
    assert orphaned("zerolab.ckpt.worker") == [] and orphaned("zerolab.run.warm_ranks") == []  # cold or forked
