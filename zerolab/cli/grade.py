"""zerolab grade: grade every submission of one lesson with nbgrader, safely, into grades.csv; or one shard of
the class, merged later (`zerolab grade merge`); and the grades for an LMS (`zerolab grade export`)."""
import fcntl
import json
import os
import queue
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from zerolab.cli.arguments import positive_int
from zerolab.errors import UserError

HELP = "grade every submission of a lesson with nbgrader (instructors)"
DESCRIPTION = """Grade every student's submission of LESSON with nbgrader, in a sandbox, and write grades.csv.

  zerolab grade LESSON [--jobs N] [--student S]      grade the course's submissions
  zerolab grade LESSON --shard K/N [--out DIR]       grade shard K of N of the students into DIR only
  zerolab grade merge LESSON DIR... [--course C]     fold shard folders into the course's gradebook
  zerolab grade export LESSON --format canvas|csv    the gradebook's scores for an LMS
  zerolab grade validate LESSON|--all                how good the hidden tests are: mutants killed, flakes
(`zerolab grade merge --help`, `zerolab grade export --help`, `zerolab grade validate --help` say more.)

Each submission in DIR/submitted/<student>/LESSON/ is first repaired in a staged copy (copy-pasted graded
cells, edited cell flags, a renamed notebook, deleted test cells), then graded by nbgrader autograde; the
gradebook DIR/gradebook.db stays the record, so `nbgrader export` and formgrader keep working.
Student code runs in a bubblewrap sandbox as a grading-only user: no network, no view of the source
notebooks, the gradebook or other students, with a memory cap, a per-cell and a per-notebook time limit and a
disk cap (set them in DIR/nbgrader_config.py: c.ZeroLab.memory_limit, cell_timeout, notebook_timeout,
disk_limit).

DIR/grades.csv gets one row per student: student, lesson, score, max_score, status, reason, where status is
  graded   scored by nbgrader
  review   scored, but a human should look (the reason says what: a repaired notebook, suspicious code)
  failed   could not be graded (the reason says why and what to do); the score is left empty, not 0
  missing  nothing submitted

--shard K/N grades the students whose id hashes to shard K (the same split on every machine), into its own
folder (default COURSE/shards/LESSON-K-of-N): a copy of the gradebook, autograded/, feedback/, grades.csv.
Shards may run at once, on one machine or many (a Kubernetes Indexed Job, a Slurm array: see deploy/).
"""
ACTIONS = ("merge", "export", "validate")  # words that are never a lesson's name


def add_arguments(parser):
    parser.add_argument("lesson", help="the lesson (nbgrader assignment) name, e.g. 04_writing_the_config")
    parser.add_argument("--course", default="autograder", help="the nbgrader course folder (default: autograder)")
    parser.add_argument("--jobs", type=positive_int("--jobs"), default=1, help="students graded at a time (default 1)")
    parser.add_argument("--student", action="append", help="grade only this student (repeatable)")
    parser.add_argument("--feedback", action="store_true",
                        help="also write DIR/feedback/<student>/LESSON/*.html (hidden tests left out)")
    parser.add_argument("--isolation", choices=("auto", "sandbox", "limits", "off"),
                        help="override ZeroLab.isolation: sandbox (bubblewrap), limits (memory/time caps only), "
                             "off (plain nbgrader); auto picks sandbox where it works")
    parser.add_argument("--shard", metavar="K/N", help="grade only shard K of N of the students (K from 1 to N)")
    parser.add_argument("--out", metavar="DIR", help="with --shard: the shard's folder "
                                                     "(default COURSE/shards/LESSON-K-of-N)")
    parser.add_argument("--release", action="store_true",
                        help="(re)generate the lesson's release and gradebook entry first (nbgrader "
                             "generate_assignment --force): after changing a lesson's tests")
    actions = {name: _action_parser(parser, name) for name in ACTIONS}
    whole = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        # `grade merge ...` and `grade export ...` are parsed by their own parser; anything else is a lesson.
        args = sys.argv[1:] if args is None else list(args)
        if args and args[0] in actions:
            return actions[args[0]].parse_known_args(args[1:], namespace)
        return whole(args, namespace)

    parser.parse_known_args = parse_known_args


def _action_parser(parser, name):
    from zerolab.grading import export, merge, validate

    module = {"merge": merge, "export": export, "validate": validate}[name]
    action = type(parser)(prog=f"{parser.prog} {name}", description=module.DESCRIPTION,
                          formatter_class=parser.formatter_class)
    module.add_arguments(action)
    action.set_defaults(handler=module.run)
    return action


def run(args):
    from zerolab.grading import report, sandbox, shards
    from zerolab.grading.coursedir import Course
    from zerolab.grading.release import ensure_assignment

    course = Course(Path(args.course).resolve())
    if not course.source_notebook(args.lesson).exists():
        raise UserError(f"no source notebook {course.source_notebook(args.lesson)}; is --course the nbgrader "
                        "course folder, and is the lesson built (python autograder/build.py)?")
    if args.out and not args.shard:
        raise UserError("--out is for shard runs: add --shard K/N (--shard 1/1 grades everyone into --out)")
    number, count = shards.parse(args.shard) if args.shard else (None, None)
    limits = course.limits()
    mode, weaker = _isolation(args.isolation or limits.isolation, sandbox)
    students = course.students(args.lesson)
    shard = None
    if args.shard:
        folder = Path(args.out or shards.default_folder(course, args.lesson, number, count)).resolve()
        if folder == course.root:
            raise UserError("--out must be a folder of its own, not the course folder")
        shard = {"lesson": args.lesson, "shard": number, "of": count, "course": str(course.root), "folder": str(folder),
                 "task": shards.scheduler_task()}
        students = [name for name in students if shards.owner(name, count) == number]
        target = shards.prepare(course, folder, args.lesson)
    else:
        target = course
    with _one_run_at_a_time(target):
        ensure_assignment(target, args.lesson, force=args.release)
        if args.student:
            unknown = sorted(set(args.student) - set(students))
            if shard:
                unknown = [name for name in unknown if shards.owner(name, shard["of"]) == shard["shard"]]
            students = [name for name in students if name in set(args.student)] + unknown
        if shard:
            shards.write_record(target.root, **shard, students=students, finished=False)
        where = f" (shard {args.shard}, into {target.root})" if shard else ""
        print(f"zerolab grade {args.lesson}{where}: {len(students)} students, {args.jobs} at a time; "
              f"limits: {limits.describe()}")
        print(f"isolation: {_describe(mode)}")
        if weaker:
            print(f"WARNING: {weaker}", file=sys.stderr)
        started = time.perf_counter()
        outcomes = _grade_all(target, args, mode, limits, students)
        best = report.max_score(target, args.lesson)
        for row in outcomes:
            if row["max_score"] is None:
                row["max_score"] = best
            if weaker and row["status"] in ("graded", "review"):
                row["reason"] = "; ".join(filter(None, [row["reason"], f"graded {_describe(mode)}"]))
        if args.student:  # a regrade of a few: the lesson's other rows stay
            report.merge_csv(target.root / "grades.csv", outcomes)
        else:
            report.write_csv(target.root / "grades.csv", outcomes, args.lesson)
        if shard:
            shards.write_record(target.root, **shard, students=students, finished=True)
    counts = {status: sum(row["status"] == status for row in outcomes)
              for status in ("graded", "review", "failed", "missing")}
    print(f"done in {time.perf_counter() - started:.1f} s: " + ", ".join(f"{n} {s}" for s, n in counts.items())
          + f"; wrote {target.root / 'grades.csv'}")
    return 1 if counts["failed"] else 0


class _one_run_at_a_time:
    """Two runs grading into one folder at once would stage, grade and log the same students over each other."""

    def __init__(self, course):
        self.path = course.work / "run.lock"

    def __enter__(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.handle = open(self.path, "a+")
        try:
            fcntl.flock(self.handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.handle.seek(0)
            holder = self.handle.read().strip() or "another process"
            self.handle.close()
            raise UserError(f"another `zerolab grade` ({holder}) is grading into {self.path.parent.parent} now; "
                            "wait for it, or give this run its own --shard/--out folder") from None
        self.handle.seek(0)
        self.handle.truncate()
        self.handle.write(f"pid {os.getpid()}")
        self.handle.flush()
        return self

    def __exit__(self, *exc):
        self.handle.close()


def _isolation(wanted, sandbox):
    """(mode, warning or '')."""
    if wanted in ("auto", "sandbox"):
        works, why = sandbox.probe()
        if works:
            return "sandbox", ""
        if wanted == "sandbox":
            raise UserError(f"the sandbox is not available: {why}")
        return "limits", (f"grading WITHOUT the sandbox: {why}. Student code can read the solutions and hidden "
                          "tests and change the gradebook; only the memory and time caps apply.")
    if wanted == "limits":
        return "limits", ("grading WITHOUT the sandbox (isolation=limits): student code can read the solutions "
                          "and change the gradebook; only the memory and time caps apply.")
    return "off", ("grading with NO isolation and NO caps (isolation=off): plain nbgrader, for comparison only.")


def _describe(mode):
    return {"sandbox": "sandbox (bubblewrap: grading-only uid, no network, only its own folder, caps)",
            "limits": "without sandbox, memory and time caps only",
            "off": "without sandbox or caps (plain nbgrader)"}[mode]


def _grade_all(course, args, mode, limits, students):
    from zerolab.grading.worker import MAX_REPAIRS

    todo = queue.Queue()
    for student in students:
        todo.put(student)
    done, lock = [], threading.Lock()
    patience = limits.notebook_timeout * (MAX_REPAIRS + 1) + 300  # a hung nbgrader, not a slow student
    homes = [Path(tempfile.mkdtemp(prefix=f"zlg{slot}-")) for slot in range(args.jobs)]

    def progress(row):
        with lock:
            done.append(row)
            score = f"{row['score']:g}/{row['max_score']:g}" if row["score"] is not None else "-"
            print(f"[{len(done):>3}/{len(students)}] {row['student']:<24} {row['status']:<8} {score:<9} "
                  f"{row.get('seconds', 0):5.1f}s  {row['reason'][:150]}", flush=True)

    def slot(number):
        worker = None
        while True:
            try:
                student = todo.get_nowait()
            except queue.Empty:
                break
            if worker is None:
                worker = _start_worker(course, args, mode, number, homes[number])
            row = _ask(worker, student, patience)
            if row is None:  # the worker died or hung: that student fails, the others go on
                _stop(worker)
                worker = None
                row = {"student": student, "lesson": args.lesson, "score": None, "max_score": None,
                       "status": "failed", "reason": f"the grading process stopped on this submission; see "
                                                     f"{homes[number] / 'worker.log'} and grade it alone with --student"}
            progress(row)
        if worker is not None:
            _stop(worker)

    threads = [threading.Thread(target=slot, args=(number,)) for number in range(args.jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for home in homes:
        if not any(row["status"] == "failed" and str(home) in row["reason"] for row in done):
            shutil.rmtree(home, ignore_errors=True)
    return done


def _start_worker(course, args, mode, number, home):
    worker = subprocess.Popen([sys.executable, "-I", "-m", "zerolab.grading.worker"], cwd=home,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    job = {"course": str(course.root), "submissions": str(course.submitted_root), "lesson": args.lesson, "mode": mode, "feedback": args.feedback,
           "slot": number, "home": str(home)}
    worker.stdin.write(json.dumps(job) + "\n")
    worker.stdin.flush()
    return worker


def _ask(worker, student, patience):
    try:
        worker.stdin.write(student + "\n")
        worker.stdin.flush()
    except BrokenPipeError:
        return None
    ready, _, _ = select.select([worker.stdout], [], [], patience)
    line = worker.stdout.readline() if ready else ""
    return json.loads(line) if line else None


def _stop(worker):
    try:
        worker.stdin.close()
        worker.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        worker.kill()
        worker.wait()
