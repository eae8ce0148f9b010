"""The grading kernel's command (zerolab.grading.kernel.KERNEL_MAIN) under nbclient's per-cell cap: the interrupt
stops the kernel's cell, and the processes the cell forked die of it rather than each raising KeyboardInterrupt
in a copy of the kernel. And zerolab.grading.forksafe: an interrupt that lands while os.fork runs its at-fork
hooks reaches the student's code, also when the fork fails (a fork bomb at the process cap lost its interrupts
there, so the same submission was graded differently from run to run)."""
import ast
import json
import os
import subprocess
import sys

import pytest

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



# An at-fork hook that gets the interrupt and then runs Python code, so the handler runs inside the hook.
HOOK_GETS_THE_INTERRUPT = """
import os, signal, sys
from zerolab.grading import forksafe
def interrupted_hook():
    os.kill(os.getpid(), signal.SIGINT)
    sum(range(1000))
if sys.argv[2] == "working":
    os.register_at_fork(after_in_parent=interrupted_hook)
else:  # a fork that fails after its hooks ran, as every fork does at the process cap
    def failing_fork():
        interrupted_hook()
        raise BlockingIOError(11, "Resource temporarily unavailable")
    forksafe._fork = failing_fork
if sys.argv[1] == "forksafe":
    forksafe.install()
try:
    try:
        pid = os.fork()
    except BlockingIOError:
        print("fork failed, not interrupted")
    else:
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        print("forked, not interrupted")
except KeyboardInterrupt:
    print("interrupted")
"""


def _fork_with_interrupt(kind, fork):
    done = subprocess.run([sys.executable, "-c", HOOK_GETS_THE_INTERRUPT, kind, fork], capture_output=True, text=True,
                          timeout=60)
    return done.stdout.strip(), done.stderr


def test_python_drops_an_interrupt_raised_in_an_at_fork_hook():
    said, errors = _fork_with_interrupt("plain", "working")
    assert said == "forked, not interrupted" and "KeyboardInterrupt" in errors  # "Exception ignored in ..."


@pytest.mark.parametrize("fork", ["working", "failing"])
def test_forksafe_raises_the_interrupt_where_the_student_called_fork(fork):
    assert _fork_with_interrupt("forksafe", fork)[0] == "interrupted"
