"""Identical real runs done once: a rank job's results (and the files it saved) kept in $ZEROLAB_RUN_CACHE.

A lesson's teaching cells start the same deterministic jobs each time the lesson runs (lesson 06's stages, lesson
09's three saves). Whoever executes a lesson many times, in both editions, answered and unanswered (the test suite,
an instructor rebuilding the course), can point ZEROLAB_RUN_CACHE at a folder of their own: the first run of a job
stores what its ranks returned and saved and the progress they reported, and every identical job after it gets a
copy, without ranks.

Never while nbgrader grades (NBGRADER_EXECUTION set): a grade comes from ranks that really ran the submission.
Both variables are read when zerolab is imported, before any learner's cell runs.
A job that reads files it was given (`load_dir`) is not cached (its input is not part of its description), nor is
a run that fails. Two processes asking for the same job at once: one runs it, the other waits for its result.
"""
import fcntl
import hashlib
import json
import os
import shutil
import tempfile

from zerolab.base.interpreter import RUN_CACHE_AT_IMPORT

PLACEHOLDER = "{zerolab-run-cache:save_dir}"
# Read once, when zerolab is imported (a lesson's first cell): a cell that sets the variables later, as a
# submission could to swap a test's runs for files of its own, changes nothing.
CONFIGURED = RUN_CACHE_AT_IMPORT


def folder():
    """The cache folder, or None when caching is off (no ZEROLAB_RUN_CACHE at start-up, or grading)."""
    return CONFIGURED


def through_cache(job, ranks, worker, run, on_event=None):
    """run(job, on_event) -> one result per rank, or a copy of what the same job returned and saved before. The
    progress events the ranks sent (steps, ops loaded) are kept too, and passed to on_event again on a copy, so a
    notebook shows the same lines."""
    root = folder()
    if root is None or job.get("load_dir"):
        return run(job, on_event)
    save_dir = job.get("save_dir")
    key = _key(job, ranks, worker)
    os.makedirs(root, exist_ok=True)
    entry = os.path.join(root, key)
    with open(entry + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
        if not os.path.exists(os.path.join(entry, "results.json")):
            events = []

            def record(event):
                events.append(event)
                if on_event:
                    on_event(event)

            results = run(job, record)
            _store(entry, results, events, save_dir)
            return results
        return _restore(entry, save_dir, on_event)


def _key(job, ranks, worker):
    described = {name: value for name, value in job.items() if name not in ("result_dir", "save_dir")}
    described.update(ranks=ranks, worker=worker, saves=bool(job.get("save_dir")))
    return hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()[:32]


def _store(entry, results, events, save_dir):
    staging = tempfile.mkdtemp(dir=os.path.dirname(entry), prefix=".staging-")
    with open(os.path.join(staging, "events.json"), "w") as handle:
        json.dump(events, handle)
    text = json.dumps(results)
    if save_dir:
        text = text.replace(json.dumps(str(save_dir))[1:-1], PLACEHOLDER)
        shutil.copytree(save_dir, os.path.join(staging, "saved"), symlinks=True)
    with open(os.path.join(staging, "results.json"), "w") as handle:
        handle.write(text)
    os.rename(staging, entry)


def _restore(entry, save_dir, on_event):
    if on_event:
        with open(os.path.join(entry, "events.json")) as handle:
            for event in json.load(handle):
                on_event(event)
    with open(os.path.join(entry, "results.json")) as handle:
        text = handle.read()
    if save_dir:
        shutil.copytree(os.path.join(entry, "saved"), save_dir, symlinks=True, dirs_exist_ok=True)
        text = text.replace(PLACEHOLDER, json.dumps(str(save_dir))[1:-1])
    return json.loads(text)
