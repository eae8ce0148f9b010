"""How long `zerolab grade` takes per notebook, with and without the sandbox, next to an empty notebook's floor;
or, with --shards, students per minute when the class is split into 1, 2, 4 shards run at once and merged.

    python scripts/bench_grading.py [--students 30] [--lesson NAME ...] [--jobs 1 2]
    python scripts/bench_grading.py --shards 1 2 4 [--students 24] [--lesson 04_writing_the_config ...]

It copies the course (autograder/) into a temporary folder, submits a correct notebook for every student of
every lesson plus an "empty" assignment (one graded cell that does nothing), and grades each lesson with
isolation off (plain nbgrader kernel) and on (the sandbox), serially and with --jobs 2.
The bar of issue 5: the sandbox adds less than a third of the empty-notebook floor per notebook.
With --shards, students per minute per core is the wall-time rate over the machine's cores; the load average
before each run says how busy the machine was (measure on an idle one).
"""
import os
import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from zerolab.grading.answers import with_solutions

REPO = Path(__file__).resolve().parent.parent
EMPTY = "empty"


def correct_notebook(course, lesson):
    release = nbformat.read(course / "release" / lesson / f"{lesson}.ipynb", as_version=4)
    source = nbformat.read(course / "source" / lesson / f"{lesson}.ipynb", as_version=4)
    return with_solutions(release, source)


def empty_assignment(course):
    cell = nbformat.v4.new_code_cell("pass")
    cell.metadata["nbgrader"] = {"grade": True, "grade_id": "nothing", "locked": True, "points": 1,
                                 "schema_version": 3, "solution": False, "task": False}
    nb = nbformat.v4.new_notebook(cells=[cell], metadata={"kernelspec": {"name": "python3", "language": "python",
                                                                         "display_name": "Python 3"}})
    (course / "source" / EMPTY).mkdir(parents=True)
    nbformat.write(nb, course / "source" / EMPTY / f"{EMPTY}.ipynb")


def grade(course, lesson, isolation, jobs):
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "zerolab", "grade", lesson, "--course", str(course),
                           "--isolation", isolation, "--jobs", str(jobs)], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    statuses = [line.split("]", 1)[1].split()[1] for line in done.stdout.splitlines() if line.startswith("[")]
    if done.returncode != 0 or set(statuses) != {"graded"}:
        print(done.stdout[-3000:], done.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"grading {lesson} ({isolation}, --jobs {jobs}) did not grade everyone")
    return seconds


def shard_rates(course, lesson, students, counts):
    """Students per minute for each shard count: N `zerolab grade --shard k/N` at once, then one merge."""
    cores = os.cpu_count()
    print(f"{students} students of {lesson}, sandboxed; shards run at the same time on this machine ({cores} cores), "
          "then merged")
    print(f"{'shards':>6} {'grading s':>10} {'merge s':>8} {'students/min':>13} {'per core':>9} {'load before':>12}")
    for count in counts:
        load = os.getloadavg()[0]
        target = course.parent / f"course-{count}"
        shutil.copytree(course, target)
        folders = [target.parent / f"shards-{count}" / f"{number}" for number in range(1, count + 1)]
        started = time.perf_counter()
        runs = [subprocess.Popen([sys.executable, "-m", "zerolab", "grade", lesson, "--course", str(target),
                                  "--shard", f"{number}/{count}", "--out", str(folder)],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for number, folder in enumerate(folders, 1)]
        outputs = [run.communicate()[0] for run in runs]
        grading = time.perf_counter() - started
        if any(run.returncode != 0 for run in runs):
            print("\n".join(output[-2000:] for output in outputs), file=sys.stderr)
            raise SystemExit(f"a shard of {count} failed")
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "zerolab", "grade", "merge", lesson, *map(str, folders), "--course",
                        str(target)], check=True, capture_output=True)
        merging = time.perf_counter() - started
        rate = students / (grading + merging) * 60
        print(f"{count:>6} {grading:10.1f} {merging:8.1f} {rate:13.1f} {rate / cores:9.2f} {load:12.1f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--lesson", action="append", help="default: every lesson in autograder/source/")
    parser.add_argument("--jobs", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shards", type=int, nargs="+", help="students per minute for these shard counts instead")
    args = parser.parse_args()
    if args.shards:
        args.lesson = args.lesson or ["03_overlap_comm"]
    lessons = args.lesson or sorted(p.name for p in (REPO / "autograder" / "source").iterdir() if p.is_dir())
    course = Path(tempfile.mkdtemp(prefix="bench-grading-")) / "course"
    course.mkdir()
    shutil.copy(REPO / "autograder" / "nbgrader_config.py", course)
    for lesson in lessons:
        shutil.copytree(REPO / "autograder" / "source" / lesson, course / "source" / lesson)
    empty_assignment(course)
    for lesson in [EMPTY] + lessons:
        subprocess.run([sys.executable, "-m", "zerolab", "grade", lesson, "--course", str(course), "--student",
                        "nobody"], capture_output=True, check=True)  # generate_assignment once, outside the timing
        nb = correct_notebook(course, lesson)
        for number in range(args.students):
            folder = course / "submitted" / f"student{number:02d}" / lesson
            folder.mkdir(parents=True)
            nbformat.write(nb, folder / f"{lesson}.ipynb")
    if args.shards:
        for lesson in args.lesson:
            shard_rates(course, lesson, args.students, args.shards)
        shutil.rmtree(course.parent, ignore_errors=True)
        return
    print(f"{args.students} students per lesson; seconds per notebook (wall time / students, CLI start included)")
    print(f"{'lesson':<26} {'jobs':>4} {'off':>7} {'sandbox':>8} {'sandbox cost':>13} {'cost / floor':>13}")
    floor = {}
    for lesson in [EMPTY] + lessons:
        for jobs in args.jobs:
            off = grade(course, lesson, "off", jobs) / args.students
            on = grade(course, lesson, "sandbox", jobs) / args.students
            if lesson == EMPTY:
                floor[jobs] = off
            cost = on - off
            print(f"{lesson:<26} {jobs:>4} {off:7.2f} {on:8.2f} {cost:+12.2f}s {cost / floor[jobs]:12.0%}", flush=True)
    shutil.rmtree(course.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
