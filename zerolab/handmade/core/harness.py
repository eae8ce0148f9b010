"""Start N gloo ranks on CPU that run the learner's cell, wait for them, and always stop every one.

The ranks are forked by a launcher that has imported torch already (zerolab.handmade.core.rank_launcher, one per
process, started on first use; else one ``python -m zerolab.handmade.core.rank JOB.json N``), in a session of their
own (zerolab.run.launch.stop takes down the ranks and whatever they started). A rank that fails writes its error;
the first one stops the rest. Each rank runs one thread.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from zerolab.handmade.core import rank_launcher
from zerolab.base.i18n import tr
from zerolab.run.launch import PORT_IN_USE, free_port, stop
from zerolab.base.interpreter import env_with_interpreter_bin

COLLECTIVE_TIMEOUT = 20  # seconds a rank waits in a collective for the others before it gives up
PORT_ATTEMPTS = 3  # another test's ranks can take the free port before rank 0 listens on it


class RanksFailed(AssertionError):
    """The ranks did not all finish; the message says what the learner's code did."""


def run(job, ranks, timeout=90, progress=True):
    """Run ``job`` (kind, source, hyper, steps, ...) on ``ranks`` processes; each rank's result, in rank order.
    With ``progress``, one line per rank as it starts and as it ends."""
    with tempfile.TemporaryDirectory(prefix="zerolab-handmade-") as folder:
        job = dict(job, result_dir=folder, collective_timeout=job.get("collective_timeout", COLLECTIVE_TIMEOUT))
        job_path = os.path.join(folder, "job.json")
        with open(job_path, "w") as handle:
            json.dump(job, handle)
        for attempt in range(PORT_ATTEMPTS):
            logs = _start_and_wait(job_path, folder, ranks, timeout, progress)
            if logs is None:
                break
            if attempt == PORT_ATTEMPTS - 1 or not _port_taken(folder, ranks, logs):
                raise RanksFailed(_failure_message(folder, ranks, logs, job))
        return [_load(os.path.join(folder, f"rank{rank}.json")) for rank in range(ranks)]


def run_checked(job, ranks, verdict=None, timeout=90, failed=""):
    """What a test cell calls: ``run``, with the ranks' failure raised as AssertionError (after ``failed``, a
    context such as "DeepSpeed did not train with your config: "), then ``verdict(results)``'s problem raised the
    same way; the results when there is none."""
    try:
        results = run(job, ranks, timeout=timeout)
    except RanksFailed as failure:
        raise AssertionError(f"{failed}{failure}") from None
    problem = verdict(results) if verdict else None
    if problem:
        raise AssertionError(problem)
    return results


def _port_taken(folder, ranks, logs):
    """Whether rank 0 lost its free port to another process between free_port() and its listen (EADDRINUSE): the
    ranks' output, or an error a rank wrote, says so. Then the job runs again on a new port."""
    errors = [_load(os.path.join(folder, f"rank{rank}.error.json"), None) for rank in range(ranks)]
    text = " ".join([logs] + [json.dumps(error) for error in errors if error]).lower()
    return any(marker.lower() in text for marker in PORT_IN_USE)


def _start_and_wait(job_path, folder, ranks, timeout, progress=False):
    """None when every rank finished; else the ranks' output, for the failure message."""
    for name in os.listdir(folder):
        if name.startswith(("rank", "log")):
            os.remove(os.path.join(folder, name))
    env = dict(env_with_interpreter_bin(), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(ranks), LOCAL_WORLD_SIZE=str(ranks), OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu",
               PYTHONUNBUFFERED="1")
    log_path = os.path.join(folder, "log.txt")
    process = rank_launcher.start(job_path, ranks, env, log_path) or _cold_start(job_path, ranks, env, log_path)
    try:
        if _wait(process, folder, ranks, timeout, progress) == 0:
            return None
    except subprocess.TimeoutExpired:
        pass
    finally:
        stop([process])
    with open(log_path) as log:
        text = [log.read()[-4000:]]
    for rank in range(ranks):
        path = os.path.join(folder, f"log{rank}.txt")
        if os.path.exists(path):
            with open(path) as rank_log:
                text.append(rank_log.read()[-4000:])
    return "\n".join(part for part in text if part) or "(no output)"


def _cold_start(job_path, ranks, env, log_path):
    """The job's own launcher process, when no warm one can be had: it imports torch, then forks the ranks."""
    with open(log_path, "w") as log:
        return subprocess.Popen([sys.executable, "-m", "zerolab.handmade.core.rank", job_path, str(ranks)], env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _wait(process, folder, ranks, timeout, progress):
    """The launcher's exit code; meanwhile, with ``progress``, a line per rank when it starts and when it ends
    (rank.py writes rank<R>.started, then rank<R>.json or rank<R>.error.json)."""
    deadline, started, ended = time.monotonic() + timeout, {}, set()
    while True:
        try:
            code = process.wait(0.1)
        except subprocess.TimeoutExpired:
            code = None
        if progress:
            for rank in range(ranks):
                prefix = os.path.join(folder, f"rank{rank}")
                if rank not in started and os.path.exists(prefix + ".started"):
                    started[rank] = time.monotonic()
                    print(tr(f"rank {rank} of {ranks}: started"), flush=True)
                failed = os.path.exists(prefix + ".error.json")
                if rank in started and rank not in ended and (failed or os.path.exists(prefix + ".json")):
                    ended.add(rank)
                    seconds = time.monotonic() - started[rank]
                    print(tr(f"rank {rank} of {ranks}: failed after {seconds:.1f} s") if failed else
                          tr(f"rank {rank} of {ranks}: finished in {seconds:.1f} s"), flush=True)
        if code is not None:
            return code
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(process.args, timeout)


def _failure_message(folder, ranks, logs, job):
    errors = [_load(os.path.join(folder, f"rank{rank}.error.json"), None) for rank in range(ranks)]
    forbidden = next((e for e in errors if e and e["message"].startswith("FORBIDDEN")), None)
    if forbidden:
        return forbidden["message"].replace("FORBIDDEN: ", "") + ": implement it with torch.distributed yourself"
    waited = [e for e in errors if e and _is_collective_failure(e["message"])]
    mine = [(rank, e) for rank, e in enumerate(errors) if e and e["in_learner_code"] and e not in waited]
    if mine:
        rank, error = mine[0]
        lines = job.get("source", "").splitlines()
        where = ""
        if error["line"] and 0 < error["line"] <= len(lines):
            where = tr(f" at line {error['line']} of your cell ({lines[error['line'] - 1].strip()})")
        elif error["line"]:
            where = tr(f" at line {error['line']} of your cell")
        said = f": {error['message']}" if error["message"].strip() else tr(" (with no message)")
        message = tr(f"rank {rank} of {ranks} raised {error['type']}{where}") + said
        context = error.get("context")
        return f"{tr(context['before'])}, {message}\n{tr(context['after'])}" if context else message
    if waited or not any(errors):
        return (f"the {ranks} ranks waited for each other and never finished (collectives give up after "
                f"{job['collective_timeout']} s): do all ranks call the same collectives, in the same order, "
                "on tensors of the same size?")
    rank, error = next((rank, e) for rank, e in enumerate(errors) if e)
    return f"rank {rank} of {ranks} failed: {error['type']}: {error['message']}\n{error['traceback'][-1500:]}"


def _is_collective_failure(message):
    message = message.lower()
    return any(word in message for word in ("timed out", "timeout", "connection closed", "connection reset",
                                              "broken pipe", "size mismatch"))


def _load(path, missing=FileNotFoundError):
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        if missing is FileNotFoundError:
            raise RanksFailed(f"a rank finished without writing its result ({os.path.basename(path)})") from None
        return missing
