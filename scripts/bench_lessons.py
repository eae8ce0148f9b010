"""Seconds each executed solution takes in a fresh python3 kernel (kernel start included).

    python scripts/bench_lessons.py [NAME ...]

The course's budget is < 30 s per lesson on a 2-core CPU, cells that launch real runs aside.
"""
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
BUDGET_S = 30


def run(name):
    nb = nbformat.read(str(ROOT / "solutions" / f"{name}.ipynb"), as_version=4)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": tmp}}).execute()
        return time.perf_counter() - started


def main(names):
    names = names or sorted(p.stem for p in (ROOT / "solutions").glob("*.ipynb"))
    for name in names:
        seconds = run(name)
        print(f"{name:28s} {seconds:6.1f} s{'  OVER BUDGET' if seconds > BUDGET_S else ''}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
