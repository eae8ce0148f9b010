"""Fast checks of the grading pieces that need no kernel: the static scan, the metadata repair, the
feedback scrubber and the limits read from nbgrader_config.py."""
import os
from pathlib import Path

import nbformat
import pytest

from zerolab.errors import UserError
from zerolab.grading import nbgrader_ext, sanitize, scan
from zerolab.grading.coursedir import Course, parse_size


@pytest.mark.parametrize("source, finding", [
    ("import builtins\nbuiltins.abs = lambda x: 0", "changes builtins.abs"),
    ("__builtins__['len'] = None", "__builtins__"),
    ("setattr(builtins, 'abs', None)", "calls setattr on builtins"),
    ("from zerolab.lesson import checks\nchecks.plain = id", "changes checks.plain"),
    ("import sys\nsys.modules['zerolab.lesson.checks'] = None", "sys.modules"),
    ("plain = lambda value, name=None: value", "rebinds 'plain'"),
    ("len = lambda x: 4", "rebinds 'len'"),
    ("open('../../../source/x/x.ipynb').read()", "outside its own folder"),
    ("paths = ['/root/solutions.ipynb']\ntext = open(paths[0]).read()", "outside its own folder"),
    ("import os\nos._exit(0)", "calls os._exit"),
    ("import socket", "network"),
    ("get_ipython().input_transformers_cleanup.append(lambda lines: [])", "get_ipython"),
])
def test_scan_flags_what_honest_solutions_do_not_need(source, finding):
    found = scan.scan_cell(source, helpers={"plain"})
    assert any(finding in line for line in found), found


@pytest.mark.parametrize("source", [
    "def f(params):\n    len = 3\n    return {'params': 2 * params}",  # a local name shadows nothing the tests use
    "import math\nfrom zerolab.lesson.checks import plain\nx = math.sqrt(2)",
    "result = f(1) / 2\nprint(f'{result:.1%}')",
    "%timeit sum(range(10))\nx = 1",
    "def broken(:",  # syntax errors fail when run; not a finding
    'config = {"offload_optimizer": {"device": "nvme", "nvme_path": "/local_nvme"}}',  # a path as config text
])
def test_scan_leaves_honest_code_alone(source):
    assert scan.scan_cell(source, helpers={"plain"}) == []


def _notebook(*cells):
    nb = nbformat.v4.new_notebook()
    for grade_id, flags in cells:
        cell = nbformat.v4.new_code_cell("x = 1")
        cell.metadata["nbgrader"] = {"grade_id": grade_id, "schema_version": 3, "task": False, **flags}
        nb.cells.append(cell)
    return nb


SOLUTION = {"grade": False, "solution": True, "locked": False}
TEST = {"grade": True, "solution": False, "locked": True, "points": 2, "checksum": "abc"}


def test_repair_restores_flags_and_drops_duplicate_and_unknown_ids():
    release = _notebook(("ex1", SOLUTION), ("test_ex1", TEST))
    submitted = _notebook(("ex1", SOLUTION), ("test_ex1", {**TEST, "solution": True, "points": 100}),
                          ("test_ex1", TEST), ("made_up", TEST))
    changes = sanitize.repair(submitted, release)
    assert [c.metadata.get("nbgrader", {}).get("grade_id") for c in submitted.cells] == ["ex1", "test_ex1", None, None]
    assert submitted.cells[1].metadata["nbgrader"] == release.cells[1].metadata["nbgrader"]
    assert any("restored points, solution of cell test_ex1" in c for c in changes), changes
    assert any("copy of cell test_ex1" in c for c in changes) and any("'made_up'" in c for c in changes)


def test_feedback_scrub_removes_hidden_lines_from_tracebacks_only():
    source = ("assert f(1) == 1, 'f(1) should be 1'\n### BEGIN HIDDEN TESTS\n"
              "assert f(123456) == 999, 'secret case'\n### END HIDDEN TESTS")
    hidden = nbgrader_ext.hidden_lines(source)
    assert hidden == ["assert f(123456) == 999, 'secret case'"]
    traceback = ["\x1b[0;31mAssertionError\x1b[0m Traceback",
                 "Cell In[3], line 3\n      1 assert f(1) == 1, 'f(1) should be 1'\n----> 3 assert f(123456) == 999, 'secret case'"]
    scrubbed = "\n".join(nbgrader_ext.scrub(traceback, hidden))
    assert "123456" not in scrubbed and "f(1) should be 1" in scrubbed and "(hidden test line)" in scrubbed


def test_sizes():
    assert parse_size("4GiB") == 4 * 2**30
    assert parse_size("512MB") == 512 * 10**6
    assert parse_size(1024) == 1024
    with pytest.raises(UserError):
        parse_size("lots")


def test_limits_come_from_the_course_config_with_defaults(tmp_path):
    assert Course(tmp_path).limits().memory_limit == 4 * 2**30
    (tmp_path / "nbgrader_config.py").write_text(
        "c = get_config()\nc.Execute.timeout = 60\nc.ZeroLab.memory_limit = '1GiB'\nc.ZeroLab.notebook_timeout = 30\n")
    limits = Course(tmp_path).limits()
    assert (limits.memory_limit, limits.cell_timeout, limits.notebook_timeout) == (2**30, 60, 30)
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\nc.ZeroLab.cell_timout = 5\n")
    with pytest.raises(UserError, match="cell_timout"):
        Course(tmp_path).limits()


def test_sandbox_mounts_under_tmp_stay_visible_over_the_private_tmp(tmp_path):
    """bwrap applies mounts in order: a virtual environment under /tmp must be bound after the private /tmp."""
    from zerolab.grading import sandbox

    venv = "/tmp/some-checkout/.venv"
    argv = sandbox.command(["python"], uid=sandbox.BASE_UID, workdir=tmp_path / "work", scratch=tmp_path / "scratch",
                           ipc_dir=tmp_path / "ipc", read_only=[venv])
    private_tmp = argv.index("/tmp", argv.index(str(tmp_path / "scratch")))
    venv_bind = max(i for i, word in enumerate(argv) if word == venv)
    assert private_tmp < venv_bind


@pytest.mark.parametrize("source", sorted(Path(__file__).resolve().parents[1].glob("autograder/source/*/*.ipynb")),
                         ids=lambda path: path.stem)
def test_the_course_solutions_raise_no_review_flag(source):
    """An honest, correct student must come out `graded`, not `review`: scan every lesson's own solutions."""
    from zerolab.grading.answers import with_solutions

    release = nbformat.read(str(source.parents[3] / "lessons" / f"{source.stem}.ipynb"), as_version=4)
    solved = with_solutions(release, nbformat.read(str(source), as_version=4))
    assert sanitize.findings(solved, release) == []


def test_scan_findings_come_in_the_same_order_in_every_process():
    """A reason is compared between runs (sharded and not): findings on one line must not follow a hash seed."""
    import subprocess
    import sys

    code = ("from zerolab.grading import scan\n"
            "print(scan.scan_cell('import glob\\nfor p in glob.glob(\"/a/*\") + glob.glob(\"/b/*\") + "
            "glob.glob(\"/c/*\") + glob.glob(\"/d/*\"):\\n    open(p)'))")
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in range(6)}
    assert len(outputs) == 1, outputs
    assert "'/a/*'" in outputs.pop()


def test_the_sandbox_is_refused_to_a_grader_that_is_not_root(monkeypatch):
    """An ordinary user's grading job (a Slurm job runs as its submitter) gets the caps-only mode, and why: the
    sandbox drops the kernel to a grading uid, which only root may do."""
    from zerolab.grading import sandbox

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    works, why = sandbox.probe()
    assert not works and "not running as root" in why
