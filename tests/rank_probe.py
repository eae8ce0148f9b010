"""A job for zerolab.handmade.harness that reports where its rank ran (tests/test_rank_launcher.py)."""
import os

import psutil


def where(job, namespace):
    launcher = psutil.Process(os.getppid())
    return {"launcher": launcher.pid, "launcher_parent": launcher.ppid(), "cwd": os.getcwd(),
            "probe": os.environ.get("ZEROLAB_PROBE"), "rank": os.environ["RANK"]}
