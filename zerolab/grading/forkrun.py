"""Runs a lesson's cells once, then each variant of an exercise in a forked copy of that state.

    python -m zerolab.grading.forkrun PLAN.json RESULTS.jsonl

Starting a kernel and re-running a lesson's cells for each of a thousand variants would take hours on 2 cores;
forking the process that already ran them takes milliseconds. PLAN is a list of steps, in notebook order:
  {"run": SOURCE}                        a cell run here (set-up, teaching cells, reference solutions)
  {"preload": [MODULE, ...]}             modules imported here (into sys.modules only, no name bound), so that
                                         each child does not import the test's DeepSpeed again
  {"fork": [{"id", "cells", "reference"}]} each variant's cells (its solution cell, then the exercise's test
                                         cell) run in a child of this process, at most "jobs" at a time: the
                                         reference runs first, and the others get FACTOR times the slowest
                                         reference's seconds (an infinite loop is a wrong answer, not a wait)
Each child works in its own copy of the folder, in its own process group (so the ranks a test launches die with
it on a timeout), and writes file descriptors 1 and 2 to files: output of subprocesses is caught as a kernel's
would be. One JSON line per variant: its id, the cells' outputs as nbformat outputs, seconds, and whether it
ran past its timeout. The cells run in an IPython shell, as in a kernel, with NBGRADER_EXECUTION set.
"""
import json
import os
import shutil
import signal
import sys
import tempfile
import time
import traceback


def main(plan_path, results_path):
    plan = json.loads(open(plan_path).read())
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    config = Config()
    config.HistoryManager.hist_file = ":memory:"  # forks must not share an SQLite file; tests read the inputs
    shell = InteractiveShell.instance(config=config)
    home = os.getcwd()
    with open(results_path, "a") as results:
        for step in plan["steps"]:
            if "run" in step:
                _run_here(shell, step["run"])
            elif "preload" in step:
                _preload(step["preload"])
            else:
                _fork_all(shell, step["fork"], plan["jobs"], home, results, plan.get("floor", FLOOR))


def _preload(modules):
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the test's own import will say what is wrong, in the child
            pass


def _run_here(shell, source):
    shell.run_cell(source, store_history=True)
    sys.stdout.flush()
    sys.stderr.flush()


FLOOR, FACTOR, CAP = 20, 4, 300  # seconds a variant may run: at least FLOOR (the plan may say), at most CAP


def _fork_all(shell, variants, jobs, home, results, floor):
    references = [v for v in variants if v.get("reference")]
    slowest = _fork_batch(shell, references, jobs, home, results, CAP)
    timeout = min(CAP, max(floor, FACTOR * slowest))
    _fork_batch(shell, [v for v in variants if not v.get("reference")], jobs, home, results, timeout)


def _fork_batch(shell, variants, jobs, home, results, timeout):
    """Runs the variants, at most jobs at a time; the slowest one's seconds."""
    waiting = list(variants)
    slowest = 0.0
    running = {}  # pid -> (variant, started, scratch)
    while waiting or running:
        while waiting and len(running) < jobs:
            variant = waiting.pop(0)
            scratch = tempfile.mkdtemp(prefix="zerolab-variant-")
            pid = os.fork()
            if pid == 0:
                _child(shell, variant, home, scratch)
            running[pid] = (variant, time.perf_counter(), scratch)
        slowest = max([slowest] + _reap(running, results, timeout))
        time.sleep(0.01)
    return slowest


def _reap(running, results, timeout):
    """Records the children that ended (or ran past timeout); their seconds."""
    ended = []
    for pid, (variant, started, scratch) in list(running.items()):
        seconds = time.perf_counter() - started
        done, status = os.waitpid(pid, os.WNOHANG)
        timed_out = not done and seconds > timeout
        if timed_out:
            _kill_group(pid)
            os.waitpid(pid, 0)
        elif not done:
            continue
        _kill_group(pid)  # what the variant left running
        del running[pid]
        record = _read_outputs(scratch)
        record.update(id=variant["id"], seconds=round(seconds, 3), timed_out=timed_out)
        results.write(json.dumps(record) + "\n")
        results.flush()
        shutil.rmtree(scratch, ignore_errors=True)
        ended.append(seconds)
    return ended


def _kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _child(shell, variant, home, scratch):
    try:
        os.setpgid(0, 0)
        work = os.path.join(scratch, "work")
        shutil.copytree(home, work, symlinks=True, ignore_dangling_symlinks=True)
        os.chdir(work)
        outputs = []
        for index, source in enumerate(variant["cells"]):
            outputs.append(_run_captured(shell, source, scratch, index))
        with open(os.path.join(scratch, "outputs.json"), "w") as handle:
            json.dump({"outputs": outputs}, handle)
    except BaseException:  # noqa: BLE001 - anything here is reported, never raised into the parent's loop
        with open(os.path.join(scratch, "outputs.json"), "w") as handle:
            json.dump({"crash": traceback.format_exc()}, handle)
    finally:
        os._exit(0)


def _run_captured(shell, source, scratch, index):
    """One cell, with fds 1 and 2 going to files; its outputs as nbformat would record them."""
    paths = [os.path.join(scratch, f"cell{index}.{name}") for name in ("out", "err")]
    saved = [os.dup(1), os.dup(2)]
    sys.stdout.flush()
    sys.stderr.flush()
    for fd, path in zip((1, 2), paths):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    try:
        result = shell.run_cell(source, store_history=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
    outputs = []
    for name, path in zip(("stdout", "stderr"), paths):
        text = open(path, errors="replace").read()
        if text:
            outputs.append({"output_type": "stream", "name": name, "text": text})
    error = result.error_in_exec or result.error_before_exec
    if error is not None:
        outputs.append({"output_type": "error", "ename": type(error).__name__, "evalue": str(error),
                        "traceback": []})
    return outputs


def _read_outputs(scratch):
    try:
        return json.loads(open(os.path.join(scratch, "outputs.json")).read())
    except (OSError, ValueError):
        return {"crash": "the variant's process died before it wrote its outputs"}


if __name__ == "__main__":
    main(*sys.argv[1:])
