"""The grading kernel's command (zerolab.grading.kernel.KERNEL_MAIN) under nbclient's per-cell cap: the interrupt
stops the kernel's cell, and the processes the cell forked die of it rather than each raising KeyboardInterrupt
in a copy of the kernel (a fork bomb's copies all printing tracebacks held the kernel's answer up past
nbclient's wait on a loaded machine, so the same submission was graded differently from run to run)."""
import ast
import json
import os
import sys

import nbformat
from nbclient import NotebookClient

from zerolab.grading.kernel import KERNEL_MAIN

FORKS = """import os
children = []
for _ in range(3):
    pid = os.fork()
    if pid == 0:
        while True:
            pass
    children.append(pid)
while True:
    pass"""
REAP = """import time
time.sleep(1)
print([os.waitpid(pid, os.WNOHANG) for pid in children])"""


def test_the_cap_interrupt_stops_the_cell_and_kills_what_it_forked(tmp_path, monkeypatch):
    spec = tmp_path / "kernels" / "zerolab-interrupt-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"argv": [sys.executable, "-c", KERNEL_MAIN, "-f",
                                                           "{connection_file}"],
                                                  "display_name": "test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("JUPYTER_PATH")])))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(FORKS), nbformat.v4.new_code_cell(REAP)])
    NotebookClient(nb, kernel_name="zerolab-interrupt-test", timeout=3, interrupt_on_timeout=True, allow_errors=True,
                   iopub_timeout=60).execute()
    assert [output.get("ename") for output in nb.cells[0].outputs] == ["KeyboardInterrupt"]
    reaped = ast.literal_eval(nb.cells[1].outputs[0].text)  # [(pid, wait status)] of the three children
    assert len(reaped) == 3 and all(os.WIFSIGNALED(status) and os.WTERMSIG(status) == 2 for _, status in reaped)
