"""A fresh release, run top to bottom as Run All runs it: unanswered exercises fail, the teaching goes on.

The release of lessons 01 and 06 is executed with nbclient as a student's Run All would (no answers filled in).
Exercise and test cells are tagged raises-exception, so JupyterLab, Notebook 7 and nbclient go on past them;
every other code cell must then run without error, including those after a failed test: the widget of lesson
01 and lesson 06's predicted-against-measured table (without the student's column until it exists).
"""
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from session_cache import run_cache

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run_release(name, tmp_path, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("ZEROLAB_RUN_CACHE", str(run_cache(tmp_path_factory)))  # lesson 06's runs: once a session
    monkeypatch.setenv("ZEROLAB_STATIC", "1")
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    nb = nbformat.read(str(ROOT / "lessons" / f"{name}.ipynb"), as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    failed, taught = [], []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        errors = [f"{out.ename}: {out.evalue}" for out in cell.outputs if out.output_type == "error"]
        graded = cell.metadata.get("nbgrader", {})
        if graded.get("solution") or graded.get("grade"):
            failed += [cell.id] if errors else []
        else:
            assert cell.execution_count, f"{name}: cell {cell.id} never ran"
            assert errors == [], f"{name}: teaching cell {cell.id} failed in a fresh release: {errors}"
            taught.append(cell)
    return nb, failed, taught


def text_of(cell):
    return "".join(out.get("text", "") for out in cell.outputs)


def test_lesson_01_teaches_to_the_end_without_answers(tmp_path, monkeypatch, tmp_path_factory):
    nb, failed, taught = run_release("01_where_memory_goes", tmp_path, monkeypatch, tmp_path_factory)
    assert "test_ex1_model_state_bytes" in failed and "test_ex4_deepspeed_zero2_gib" in failed
    widget = next(cell for cell in taught if "memory_explorer" in cell.source)
    assert any("image/png" in out.get("data", {}) for out in widget.outputs), "the figure after a failed test"
    assert nb.cells.index(widget) > [cell.id for cell in nb.cells].index("test_ex1_model_state_bytes")


def test_lesson_06_measures_and_compares_without_answers(tmp_path, monkeypatch, tmp_path_factory):
    if os.environ.get("NBGRADER_EXECUTION"):
        pytest.skip("real runs skip themselves while grading")
    nb, failed, taught = run_release("06_predict_then_measure", tmp_path, monkeypatch, tmp_path_factory)
    assert "test_ex1_optimizer_bytes" in failed and "test_ex2_training_bytes" in failed
    runs = next(cell for cell in taught if "run_in_notebook(config" in cell.source)
    for stage in (1, 3, 2):
        assert f"ZeRO-{stage}, offload_optimizer=" in text_of(runs), "each run names its configuration"
    table = next(cell for cell in taught if "result.table(yours=yours)" in cell.source)
    assert "no column 'yours' yet" in text_of(table) and "predicted" in text_of(table)
    headers = [line for line in text_of(table).splitlines() if line.startswith("component")]
    assert len(headers) == 3 and not any("yours" in line for line in headers)
    traffic = next(cell for cell in taught if "traffic_run.traffic_table()" in cell.source)
    assert "no 'yours' yet" in text_of(traffic) and "to host measured" in text_of(traffic), \
        "the measured offload traffic is shown before exercise 4 is answered"
