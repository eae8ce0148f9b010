"""zerolab grade validate: how good each exercise's tests are, measured. Mutants of the reference solution, the
hand-written wrong and right answers, the blank release and repeated runs of the solution go through the
exercise's tests (visible and hidden), and the report says what got through."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from zerolab.errors import UserError

DESCRIPTION = """Validate the hidden tests of LESSON (or of every lesson with --all): for each graded exercise,
run against its tests (visible and hidden)
  - mutants of the reference solution: operators swapped, constants changed (+-1, x2, /2, 2**30 vs 10**9),
    a statement or a term dropped, arguments swapped, a return replaced by None, a collective swapped;
  - the wrong and right answers written by hand: tests/submissions/feedback.py and corpus.py, and a lesson's own
    (lessons 08 and 09: VALIDATION in tests/handmade_cases.py and tests/submissions/lesson09.py);
  - the blank release (must fail) and the reference solution --runs times (must always pass: else a flake).
A mutant the tests pass is a SURVIVOR: a wrong solution that would get full marks. Either a hidden test should
catch it, or it is equivalent (it computes the same thing) and an instructor lists it, with the reason, in
autograder/src/LESSON.equivalent.toml:

  [[equivalent]]
  exercise = "ex2_per_gpu_bytes"
  mutant = "line 4: return a * b  ->  return b * a"     # the diff exactly as the report prints it
  reason = "multiplication commutes"

The bar, per exercise: at least 90% of the non-equivalent mutants killed, every hand-written wrong answer
failed and every right one passed, the blank release failed, no flake. Reports go to autograder/validation/
LESSON.md and LESSON.json; the exit status is 1 when an exercise is below the bar.

Each variant runs in a fork of one process that ran the lesson's cells once (no kernel start, no nbgrader
pipeline), and is scored by nbgrader's own rule (an error or any stderr output in the test cell: no points).
"""


def add_arguments(parser):
    parser.add_argument("lesson", nargs="?", help="the lesson to validate, e.g. 04_writing_the_config")
    parser.add_argument("--all", action="store_true", help="validate every lesson of the course")
    parser.add_argument("--course", default="autograder", help="the nbgrader course folder (default: autograder)")
    parser.add_argument("--exercise", action="append", metavar="GRADE_ID", help="only this exercise (repeatable)")
    parser.add_argument("--runs", type=int, default=5, help="runs of the reference solution, for flakes (default 5)")
    parser.add_argument("--max-mutants", type=int, metavar="N",
                        help="at most N mutants per exercise, spread evenly over the list (a sample; default all)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="variants run at a time (default: the number of cores)")
    parser.add_argument("--out", metavar="DIR", help="where the reports go (default COURSE/validation)")


def run(args):
    from zerolab.grading import validate_report

    course = Path(args.course).resolve()
    lessons = _lessons(course, args)
    out = Path(args.out) if args.out else course / "validation"
    out.mkdir(parents=True, exist_ok=True)
    below = []
    for lesson in lessons:
        started = time.perf_counter()
        result = validate_lesson(course, lesson, only=args.exercise, runs=args.runs, max_mutants=args.max_mutants,
                                 jobs=args.jobs)
        result["seconds"] = round(time.perf_counter() - started, 1)
        paths = validate_report.write(result, out)
        below += [f"{lesson} {name}" for name in validate_report.below_bar(result)]
        print(f"{lesson}: {validate_report.summary_line(result)}  ->  {paths[0]}")
    if not args.exercise and not args.max_mutants:  # the index of every full report in the folder
        reports = [json.loads(path.read_text()) for path in sorted(out.glob("*.json"))]
        (out / "README.md").write_text(validate_report.index([r for r in reports if r.get("sample_by") != "you"]))
    if below:
        print("below the bar: " + ", ".join(below), file=sys.stderr)
        return 1
    return 0


def _lessons(course, args):
    names = sorted(p.name for p in (course / "source").iterdir() if (p / f"{p.name}.ipynb").exists())
    if args.all:
        return names
    if not args.lesson:
        raise UserError("name a lesson (e.g. `zerolab grade validate 04_writing_the_config`) or pass --all")
    if args.lesson not in names:
        raise UserError(f"no lesson {args.lesson!r} in {course / 'source'}; the lessons are: {', '.join(names)}")
    return [args.lesson]


def validate_lesson(course, lesson, only=None, runs=5, max_mutants=None, jobs=1, timeout_floor=None):
    """Every variant of every chosen exercise through its tests; the result the report is written from."""
    import nbformat

    from zerolab.grading import variants as variant_lib

    source_nb = nbformat.read(str(course / "source" / lesson / f"{lesson}.ipynb"), as_version=4)
    allowlist, course_sample = variant_lib.settings(course / "src" / f"{lesson}.equivalent.toml")
    sample_by = "you" if max_mutants else "course" if course_sample else None
    max_mutants = max_mutants or course_sample
    written = variant_lib.handwritten(course.parent, lesson)
    found = variant_lib.exercises(source_nb)
    chosen = [e for e in found if not only or e[0] in only]
    if only and len(chosen) != len(set(only)):
        known = ", ".join(e[0] for e in found)
        raise UserError(f"--exercise names a grade id that is not one of {lesson}'s exercises; they are: {known}")
    exercises, made = {}, {}
    for grade_id, solution_index, test_index in chosen:
        solution, test = source_nb.cells[solution_index], source_nb.cells[test_index]
        every = variant_lib.mutant_variants(solution.source)
        made[grade_id] = {variant.label for variant in every}
        mutated = _sample(every, max_mutants)
        listed = [variant_lib.Variant("reference", solution.source, "pass", "reference solution")] * runs
        listed += [variant_lib.Variant("blank", variant_lib.blank(solution), "fail", "blank release")]
        listed += written.get(grade_id, []) + mutated
        exercises[grade_id] = variant_lib.Exercise(
            grade_id, float(test.metadata["nbgrader"]["points"]), solution, test, listed,
            {mutant: reason for (exercise, mutant), reason in allowlist.items() if exercise == grade_id})
    tests = {test_index for _, _, test_index in found}
    outcomes = _run_plan(source_nb, chosen, tests, exercises, jobs, lesson, timeout_floor)
    result = _result(course, lesson, source_nb, exercises, outcomes, runs)
    if sample_by:
        result.update(sample=max_mutants, sample_by=sample_by)
        for exercise in result["exercises"]:
            exercise["mutants_made"] = len(made[exercise["grade_id"]])
    # an entry that names no mutant the generator makes now (sampled or not) is left over from an older solution
    result["stale_equivalents"] = [f"{exercise}: {mutant}" for exercise, mutant in allowlist
                                   if exercise in made and mutant not in made[exercise]]
    return result


def _sample(listed, limit):
    if not limit or len(listed) <= limit:
        return listed
    step = len(listed) / limit
    return [listed[int(i * step)] for i in range(limit)]


def _run_plan(source_nb, chosen, tests, exercises, jobs, lesson, timeout_floor):
    """One forkrun process for the lesson: cells in order (every exercise's test cell, `tests`, left out), each
    chosen exercise's variants forked at its place."""
    solution_at = {solution_index: grade_id for grade_id, solution_index, _ in chosen}
    last = max(test_index for _, _, test_index in chosen)
    steps = []
    for index, cell in enumerate(source_nb.cells[:last + 1]):
        if cell.cell_type != "code" or index in tests:
            continue
        if index in solution_at:
            exercise = exercises[solution_at[index]]
            forks = [{"id": f"{exercise.grade_id}/{n}", "cells": [v.source, exercise.test.source],
                      "reference": v.kind == "reference"} for n, v in enumerate(exercise.variants)]
            steps.append({"preload": imported_modules(exercise.test.source)})
            steps.append({"fork": forks})
        steps.append({"run": cell.source})
    work = Path(tempfile.mkdtemp(prefix=f"zerolab-validate-{lesson}-"))
    plan, results = work / "plan.json", work / "results.jsonl"
    options = {"floor": timeout_floor} if timeout_floor else {}
    plan.write_text(json.dumps({"steps": steps, "jobs": jobs, **options}))
    total = sum(len(e.variants) for e in exercises.values())
    env = dict(os.environ, MPLBACKEND="Agg", OMP_NUM_THREADS="1")
    lessons_dir = work / "cwd"
    lessons_dir.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "zerolab.grading.forkrun", str(plan), str(results)],
                               cwd=lessons_dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    errors = []
    reader = threading.Thread(target=lambda: errors.append(process.stderr.read()), daemon=True)
    reader.start()
    shown = -1
    while process.poll() is None:
        shown = _progress(lesson, results, total, shown)
        time.sleep(1)
    reader.join()
    _progress(lesson, results, total, shown)
    outcomes = {}
    if results.exists():
        for line in results.read_text().splitlines():
            record = json.loads(line)
            outcomes[record["id"]] = record
    if process.returncode != 0 or len(outcomes) < total:
        raise UserError(f"validating {lesson} stopped after {len(outcomes)} of {total} variants "
                        f"(exit status {process.returncode}): {''.join(errors)[-2000:]}")
    shutil.rmtree(work, ignore_errors=True)
    return outcomes


def imported_modules(source):
    """The absolute module names a cell imports (and their packages)."""
    import ast

    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return sorted(set(names))


def _progress(lesson, results, total, shown):
    done = len(results.read_text().splitlines()) if results.exists() else 0
    if done != shown and sys.stderr.isatty() or done == total and shown != total:
        print(f"\r{lesson}: {done}/{total} variants run", end="" if done < total else "\n", file=sys.stderr,
              flush=True)
    return done


def _result(course, lesson, source_nb, exercises, outcomes, runs):
    import nbformat
    from nbgrader.utils import determine_grade

    result = {"lesson": lesson, "runs": runs, "source_digest": source_digest(course, lesson, source_nb), "exercises": []}
    for exercise in exercises.values():
        rows = []
        for n, variant in enumerate(exercise.variants):
            record = outcomes[f"{exercise.grade_id}/{n}"]
            test = nbformat.from_dict(dict(exercise.test, outputs=(record.get("outputs") or [[]])[-1]))
            if "crash" in record or record["timed_out"]:
                score = 0.0
            else:
                score, _ = determine_grade(test)
            passed = score is not None and float(score) >= exercise.points
            rows.append({"kind": variant.kind, "label": variant.label, "operator": variant.operator,
                         "expect": variant.expect, "passed": passed, "seconds": record["seconds"],
                         "output": _why(record, test), "equivalent": exercise.equivalent.get(variant.label)})
        result["exercises"].append({"grade_id": exercise.grade_id, "points": exercise.points, "variants": rows})
    return result


def _why(record, test):
    """One line: what the test cell said (its error), or why there is nothing to say."""
    if record["timed_out"]:
        return f"ran past the {record['seconds']:.0f} s timeout"
    if "crash" in record:
        return "the process died: " + record["crash"].strip().splitlines()[-1][:200]
    for output in test.outputs:
        if output.output_type == "error":
            return f"{output.ename}: {output.evalue}".splitlines()[0][:300]
        if output.output_type == "stream" and output.name == "stderr":
            return "stderr: " + output.text.strip().splitlines()[-1][:300] if output.text.strip() else "stderr"
    return ""


def source_digest(course, lesson, source_nb):
    """What a report depends on: the lesson's code cells, the mutant generator, the instructor's allowlist and this
    lesson's hand-written answers (not the files that hold them: a new answer for one lesson leaves the other
    lessons' reports fresh). A committed report whose digest differs is stale."""
    import hashlib

    from zerolab.grading import mutant_operators, mutants, variants

    digest = hashlib.sha256()
    for path in (Path(mutants.__file__), Path(mutant_operators.__file__), course / "src" / f"{lesson}.equivalent.toml"):
        digest.update(path.read_bytes() if path.exists() else b"-")
    for cell in source_nb.cells:
        if cell.cell_type == "code":
            digest.update(cell.source.encode())
    answers = {grade_id: [[v.kind, v.source, v.expect, v.label] for v in found]
               for grade_id, found in variants.handwritten(course.parent, lesson).items()}
    digest.update(json.dumps(answers, sort_keys=True).encode())
    return digest.hexdigest()[:16]
