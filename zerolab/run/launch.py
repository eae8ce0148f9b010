"""Start N rank processes, follow them, and always tear every one of them down.

The DeepSpeed launcher cannot run inside a notebook kernel, so this module does its job: it picks a free
port, sets MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK and WORLD_SIZE for each rank, and starts the rank's worker
(``zerolab.run.worker``): on CPU, forked from the kernel's warm server (zerolab.run.warm_ranks, which has done the
ranks' imports once), else, or when no warm server can be had, as ``python -m WORKER`` in a fresh process. Never a
fork of the kernel itself. Each rank leads its own session, so stopping a rank also stops what it started (e.g.
the compiler building a DeepSpeed op). Teardown happens on success, on the first rank that fails, on timeout and
on KeyboardInterrupt.
"""
import collections
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from zerolab.run.diagnose import RunFailed, RunTimeout, explain_failure
from zerolab.run.op_locks import clear_orphaned_locks
from zerolab.run.worker import EVENT_PREFIX
from zerolab.base.interpreter import env_with_interpreter_bin

PORT_ATTEMPTS = 3
PORT_IN_USE = ("EADDRINUSE", "address already in use")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def launch(job, ranks, timeout=600, on_event=None, on_tick=None, worker="zerolab.run.worker", progress=None):
    """Run ``job`` (config, model, steps, device) on ``ranks`` processes of ``worker``; return each rank's result.
    With $ZEROLAB_RUN_CACHE set (never while grading), an identical job's results come from there
    (zerolab.run.run_cache). ``progress``: True shows the ranks' progress in place (zerolab.run.progress), a
    Progress object shows it there; it stands in for ``on_event`` and ``on_tick``."""
    from zerolab.run.run_cache import through_cache

    if progress:
        from zerolab.run.progress import Progress

        shown = Progress() if progress is True else progress
        on_event, on_tick = shown.on_event, shown.on_tick

    return through_cache(job, ranks, worker,
                         lambda job, on_event: _launch(job, ranks, timeout, on_event, on_tick, worker), on_event)


def _launch(job, ranks, timeout, on_event, on_tick, worker):
    for lock in clear_orphaned_locks():
        print(f"zerolab: removed a DeepSpeed op build lock that no process holds (left by a killed build): {lock}",
              file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="zerolab-run-") as result_dir:
        job = dict(job, result_dir=result_dir)
        job_path = os.path.join(result_dir, "job.json")
        with open(job_path, "w") as handle:
            json.dump(job, handle)
        deadline = time.monotonic() + timeout
        for attempt in range(PORT_ATTEMPTS):
            try:
                _run_ranks(job_path, job["device"], result_dir, ranks, deadline, timeout, on_event, on_tick, worker)
                break
            except RunFailed as failure:
                port_taken = any(marker.lower() in failure.log_tail.lower() for marker in PORT_IN_USE)
                if not port_taken or attempt == PORT_ATTEMPTS - 1:
                    raise
                for name in os.listdir(result_dir):
                    if name.startswith("rank"):
                        os.remove(os.path.join(result_dir, name))
        return [_read(os.path.join(result_dir, f"rank{rank}.json")) for rank in range(ranks)]


def _run_ranks(job_path, device, result_dir, ranks, deadline, timeout, on_event, on_tick, worker):
    port = free_port()
    lines = queue.Queue()
    tails = [collections.deque(maxlen=60) for _ in range(ranks)]
    processes, readers = [], []
    try:
        for rank in range(ranks):
            env = dict(env_with_interpreter_bin(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                       LOCAL_RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks),
                       PYTHONUNBUFFERED="1")
            env["DS_ACCELERATOR"] = device  # DeepSpeed's accelerator names match ours: cpu, cuda
            process, reader = _start_rank(worker, job_path, env, os.path.join(result_dir, f"log{rank}.txt"),
                                          rank, lines)
            processes.append(process)
            readers.append(reader)
        _follow(processes, readers, lines, tails, result_dir, deadline, timeout, on_event, on_tick)
    finally:
        stop(processes)


def _start_rank(worker, job_path, env, log_path, rank, lines):
    """The rank's process (a Popen, or a warm server's child) and the thread that puts its output lines in `lines`."""
    from zerolab.run import warm_ranks

    process = warm_ranks.start_rank(worker, job_path, env, log_path) if env["DS_ACCELERATOR"] == "cpu" else None
    if process is not None:
        reader = threading.Thread(target=_follow_log, args=(rank, log_path, process, lines), daemon=True)
    else:
        process = subprocess.Popen([sys.executable, "-m", worker, job_path], env=env, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                   start_new_session=True)
        reader = threading.Thread(target=_pump, args=(rank, process.stdout, lines), daemon=True)
    reader.start()
    return process, reader


def _follow(processes, readers, lines, tails, result_dir, deadline, timeout, on_event, on_tick):
    finished = set()
    while len(finished) < len(processes):
        try:
            rank, line = lines.get(timeout=0.2)
        except queue.Empty:
            rank, line = None, None
        if line is not None:
            if line.startswith(EVENT_PREFIX):
                event = json.loads(line[len(EVENT_PREFIX):])
                if event.get("event") == "error":
                    _fail(rank, processes, tails, result_dir)
                if on_event:
                    on_event(event)
            else:
                tails[rank].append(line.rstrip("\n"))
        elif on_tick:
            on_tick()
        for rank, process in enumerate(processes):
            code = process.poll()
            if code is None or rank in finished:
                continue
            if code != 0:
                readers[rank].join(timeout=2)  # its last lines: the error
                _drain(lines, tails, on_event)
                _fail(rank, processes, tails, result_dir)
            finished.add(rank)
        if time.monotonic() > deadline:
            raise RunTimeout(f"the run did not finish within {timeout:g} s, so every rank was stopped; "
                             "allow more time (--timeout) or run fewer steps", rank=None,
                             log_tail="\n".join(line for tail in tails for line in tail))
    for reader in readers:
        reader.join(timeout=2)
    _drain(lines, tails, on_event)  # a fast rank's last step can still be in the queue when every rank has ended


def _fail(rank, processes, tails, result_dir):
    """Raise the one clear error for the first failing rank (after a moment for its error file to land)."""
    process = processes[rank]
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    error = _read(os.path.join(result_dir, f"rank{rank}.error.json"), missing=None)
    tail = "\n".join(tails[rank])
    raise RunFailed(explain_failure(rank, error, process.returncode, tail), rank=rank, log_tail=tail)


def _drain(lines, tails, on_event=None):
    while True:
        try:
            rank, line = lines.get_nowait()
        except queue.Empty:
            return
        if not line.startswith(EVENT_PREFIX):
            tails[rank].append(line.rstrip("\n"))
        elif on_event:
            on_event(json.loads(line[len(EVENT_PREFIX):]))


def _follow_log(rank, path, process, lines, interval=0.05):
    """The lines a forked rank writes to its log, as it writes them, until it has ended and all is read."""
    handle, pending = None, ""
    try:
        while True:
            ended = process.poll() is not None  # before reading: what it wrote before it ended is read below
            if handle is None and os.path.exists(path):
                handle = open(path, errors="replace")
            chunk = handle.read() if handle is not None else ""
            *complete, pending = (pending + chunk).split("\n")
            for line in complete:
                lines.put((rank, line + "\n"))
            if ended and not chunk:
                if pending:
                    lines.put((rank, pending))
                return
            if not chunk:
                time.sleep(interval)
    finally:
        if handle is not None:
            handle.close()


def _pump(rank, stream, lines):
    for line in stream:
        lines.put((rank, line))
    stream.close()


def stop(processes, grace=3.0):
    """Stop every rank and everything it started: SIGTERM to each process group, then SIGKILL what is left."""
    victims = []
    for process in processes:
        try:
            parent = psutil.Process(process.pid)
            victims += [parent] + parent.children(recursive=True)
        except psutil.NoSuchProcess:
            pass
    for process in processes:
        _signal_group(process.pid, signal.SIGTERM)
    _, alive = psutil.wait_procs(victims, timeout=grace)
    for process in processes:
        _signal_group(process.pid, signal.SIGKILL)
    for victim in alive:
        try:
            victim.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace)
    for process in processes:
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass


def _signal_group(pid, sig):
    try:
        os.killpg(pid, sig)  # the rank leads its own group (start_new_session)
    except (ProcessLookupError, PermissionError):
        pass


def _read(path, missing=FileNotFoundError):
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        if missing is FileNotFoundError:
            raise RunFailed(f"a rank finished without writing its result ({os.path.basename(path)})")
        return missing
