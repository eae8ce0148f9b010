"""A warm launcher for lesson 08's jobs: a warm server (zerolab.run.warm) per kernel that has imported what the ranks
need, and forks a job's launcher on request, so that a job starts its ranks in milliseconds instead of the seconds
torch's import takes.

``python -m zerolab.handmade.core.rank_launcher`` is the server. Each child it forks is a job's launcher, which forks the
job's ranks as ``python -m zerolab.handmade.core.rank`` would. The server never runs the learner's code, and it imports
no DeepSpeed, which the learner's code must not find already imported.

``start(job_path, ranks, env, log_path)`` is the kernel's side: a handle with the ``pid``, ``wait`` and ``poll`` of a
``subprocess.Popen``, or None when no warm launcher can be had (zerolab.handmade.core.harness then starts a cold one).
"""
import os

from zerolab.run import warm

SERVER = "zerolab.handmade.core.rank_launcher"  # the module itself, run as python -m


def start(job_path, ranks, env, log_path):
    return warm.start(SERVER, {"job": job_path, "ranks": ranks, "env": env, "cwd": os.getcwd(), "log": log_path})


def shut_down():
    """Stop this process's warm launcher now (the next job starts a new one)."""
    warm.shut_down(SERVER)


def warm_pid():
    """The pid of this process's warm launcher, or None: it outlives a job by design."""
    return warm.warm_pid(SERVER)


def _warm_up():
    from zerolab.handmade.core import rank

    rank.import_what_ranks_need()


def _run_job(request):
    from zerolab.handmade.core import rank

    return rank.fork_ranks_now(request["job"], request["ranks"])


if __name__ == "__main__":
    warm.serve(_warm_up, _run_job)
