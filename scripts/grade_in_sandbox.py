"""What validation says passes or fails, graded as a class through `zerolab grade` in the sandbox, several runs in
a row; the result goes to docs/sandbox_grading.json and .md.

    python scripts/grade_in_sandbox.py               # every lesson, 3 runs (about 10 minutes a run, 2 cores)
    python scripts/grade_in_sandbox.py --runs 1 --lesson 09_checkpoints

`zerolab grade validate` runs each variant in a fork of one process, outside the sandbox. This script grades, as
students hand them in, what a validation report counts on: lessons 08 and 09's hand-written answers (right and
wrong) and every lesson's allowlisted equivalent mutants (autograder/src/LESSON.equivalent.toml: the instructor
says they are right). Notebook k of a lesson holds the k-th of these for every exercise (the solution where an
exercise has fewer), and nbgrader grades it in the bubblewrap sandbox under the course's limits (the per-cell cap,
the process cap, no /dev/shm). A test cell is expected to score 0 for a wrong answer and full points otherwise:
an allowlist entry that holds only outside the sandbox shows up here as a lost point.
The exercises are graded independently (a later exercise's ranks and cascades use the course's earlier
functions where the learner's disagree), so one notebook can hold answers to several.
tests/test_sandbox_grading.py checks that the committed result is fresh and that every run met that.
"""
import argparse
import csv
import functools
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from zerolab.grading import mutants, variants  # noqa: E402
from zerolab.grading.answers import with_answers, with_solutions  # noqa: E402

COURSE = ROOT / "autograder"
LESSONS = tuple(sorted({*variants.LESSON_HANDWRITTEN, *(path.name.split(".")[0]
                                                         for path in (COURSE / "src").glob("*.equivalent.toml"))}))
RESULT = ROOT / "docs" / "sandbox_grading.json"


@functools.cache
def source_notebook(lesson):
    """The lesson's nbgrader source, read once (callers only read it)."""
    return nbformat.read(COURSE / "source" / lesson / f"{lesson}.ipynb", as_version=4)


@functools.cache
def points(lesson):
    """{test grade_id: points} of the lesson's source notebook."""
    source = source_notebook(lesson)
    return {cell.metadata["nbgrader"]["grade_id"]: cell.metadata["nbgrader"]["points"] for cell in source.cells
            if cell.metadata.get("nbgrader", {}).get("grade")}


def digest(lesson):
    """What the result depends on: the lesson's code cells, the answers graded and the grading config."""
    hashed = hashlib.sha256((COURSE / "nbgrader_config.py").read_bytes())
    for cell in source_notebook(lesson).cells:
        if cell.cell_type == "code":
            hashed.update(cell.source.encode())
    hashed.update(json.dumps(answers(lesson), sort_keys=True).encode())
    return hashed.hexdigest()[:16]


@functools.cache
def answers(lesson):
    """{exercise: [(kind, name, source)]}: the lesson's hand-written answers ("wrong", "right") and its allowlisted
    mutants ("equivalent", named by their diff)."""
    listed = {exercise: [(kind, name, text) for kind in ("wrong", "right") for name, text in cases[kind].items()]
              for exercise, cases in variants.lesson_answers(ROOT, lesson).items()}
    allowlist, _ = variants.settings(COURSE / "src" / f"{lesson}.equivalent.toml")
    source = source_notebook(lesson)
    solutions = {grade_id: source.cells[index].source for grade_id, index, _ in variants.exercises(source)}
    for exercise, source in solutions.items():
        named = {exercise_mutant for exercise_mutant in allowlist if exercise_mutant[0] == exercise}
        for mutant in mutants.mutants(source, mutants.solution_lines(source)):
            if (exercise, mutant.diff) in named:
                listed.setdefault(exercise, []).append(("equivalent", mutant.diff, mutant.source))
    return listed


def students(lesson):
    """{student: {exercise: (kind, answer name, source)}}: student k holds the k-th answer of every exercise."""
    listed = answers(lesson)
    count = max(len(entries) for entries in listed.values())
    return {f"student{k:02d}": {exercise: entries[k] for exercise, entries in listed.items() if k < len(entries)}
            for k in range(count)}


def expected_scores(lesson, held):
    """{test grade_id: points expected} for a student holding `held` (solutions elsewhere)."""
    wrong = {"test_" + exercise for exercise, (kind, _, _) in held.items() if kind == "wrong"}
    return {grade_id: 0.0 if grade_id in wrong else float(value) for grade_id, value in points(lesson).items()}


def make_course(lesson, folder):
    course = folder / "course"
    course.mkdir(parents=True)
    shutil.copy(COURSE / "nbgrader_config.py", course)
    shutil.copytree(COURSE / "source" / lesson, course / "source" / lesson)
    first = zerolab_grade(course, lesson, "--student", "nobody")  # generate_assignment only
    if first.returncode != 0:
        raise SystemExit(f"could not generate {lesson}'s release:\n{first.stdout[-2000:]}{first.stderr[-2000:]}")
    release = nbformat.read(course / "release" / lesson / f"{lesson}.ipynb", as_version=4)
    source = nbformat.read(course / "source" / lesson / f"{lesson}.ipynb", as_version=4)
    solved = with_solutions(release, source)
    for student, held in students(lesson).items():
        nb = with_answers(solved, {exercise: text for exercise, (_, _, text) in held.items()})
        (course / "submitted" / student / lesson).mkdir(parents=True)
        nbformat.write(nb, course / "submitted" / student / lesson / f"{lesson}.ipynb")
    return course


def zerolab_grade(course, lesson, *args):
    return subprocess.run([sys.executable, "-m", "zerolab", "grade", lesson, "--course", str(course),
                           "--isolation", "sandbox", *args], capture_output=True, text=True)


def grade_once(lesson, jobs):
    """One run: a fresh course, every student graded; {student: {test grade_id: score}}, statuses, seconds."""
    from nbgrader.api import Gradebook

    with tempfile.TemporaryDirectory(prefix=f"sandbox-class-{lesson}-") as folder:
        course = make_course(lesson, Path(folder))
        started = time.perf_counter()
        done = zerolab_grade(course, lesson, "--jobs", str(jobs))
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"zerolab grade {lesson} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        with open(course / "grades.csv", newline="") as handle:
            statuses = {row["student"]: (row["status"], row["reason"]) for row in csv.DictReader(handle)}
        scores, messages = {}, {}
        with Gradebook(f"sqlite:///{course}/gradebook.db") as gradebook:
            for student in students(lesson):
                scores[student] = {grade_id: gradebook.find_grade(grade_id, lesson, lesson, student).auto_score
                                   for grade_id in points(lesson)}
                messages[student] = _failures(course / "autograded" / student / lesson / f"{lesson}.ipynb")
    return scores, statuses, messages, seconds


def _failures(path):
    """{test grade_id: the last line of its error output}, for a report that explains a surprise."""
    if not path.exists():
        return {}
    found = {}
    for cell in nbformat.read(path, as_version=4).cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "")
        for output in cell.get("outputs", []) if grade_id.startswith("test_") else []:
            if output.get("output_type") == "error":
                found[grade_id] = f"{output.get('ename')}: {output.get('evalue')}"[:300]
            elif output.get("name") == "stderr" and output.get("text", "").strip():
                found[grade_id] = output["text"].strip().splitlines()[-1][:300]
    return found


def grade_lesson(lesson, runs, jobs):
    classes = students(lesson)
    result = {"digest": digest(lesson), "jobs": jobs, "notebooks": len(classes), "runs": []}
    answers = [{"student": student, "exercise": exercise, "kind": kind, "answer": name}
               for student, held in classes.items() for exercise, (kind, name, _) in held.items()]
    result["answers"] = answers
    for number in range(1, runs + 1):
        print(f"{lesson}: run {number} of {runs}, {len(classes)} notebooks, --jobs {jobs} ...", file=sys.stderr,
              flush=True)
        scores, statuses, messages, seconds = grade_once(lesson, jobs)
        unexpected = []
        for student, held in classes.items():
            want = expected_scores(lesson, held)
            for grade_id, score in scores[student].items():
                if score != want[grade_id]:
                    exercise = grade_id.removeprefix("test_")
                    kind, name, _ = held.get(exercise, ("solution", "the solution", None))
                    unexpected.append({"student": student, "test": grade_id, "answer": f"{kind}: {name}",
                                       "expected": want[grade_id], "got": score,
                                       "message": messages[student].get(grade_id, "")})
        result["runs"].append({"seconds": round(seconds, 1), "seconds_per_notebook": round(seconds / len(classes), 1),
                               "statuses": sorted({status for status, _ in statuses.values()}),
                               "not_graded_plainly": {student: f"{status}: {reason}" for student, (status, reason)
                                                      in statuses.items() if status != "graded"},
                               "unexpected": unexpected})
        print(f"  {seconds:.0f} s, {len(unexpected)} unexpected", file=sys.stderr, flush=True)
    return result


def render(results):
    lines = ["# Validation's answers graded as a class, in the sandbox",
             "",
             "Generated by `python scripts/grade_in_sandbox.py`; do not edit. Each notebook holds the k-th answer of "
             "every exercise and the solution elsewhere, graded by `zerolab grade --isolation sandbox` under the "
             "course's limits: lessons 08 and 09's hand-written answers (tests/handmade_cases.py, "
             "tests/submissions/lesson09.py) and every lesson's allowlisted equivalent mutants "
             "(autograder/src/LESSON.equivalent.toml). Expected: 0 points on the test of a wrong answer, full points "
             "on every other test.",
             ""]
    for lesson, result in results.items():
        counts = {}
        for entry in result["answers"]:
            kinds = counts.setdefault(entry["exercise"], {})
            kinds[entry["kind"]] = kinds.get(entry["kind"], 0) + 1
        lines += [f"## {lesson}", "",
                  f"{result['notebooks']} notebooks, --jobs {result['jobs']}; answers per exercise: "
                  + "; ".join(f"{exercise} " + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
                              for exercise, kinds in sorted(counts.items())),
                  "", "| run | seconds | seconds per notebook | statuses | graded not as expected |",
                  "|---|---|---|---|---|"]
        for number, run in enumerate(result["runs"], 1):
            lines.append(f"| {number} | {run['seconds']} | {run['seconds_per_notebook']} | "
                         f"{', '.join(run['statuses'])} | {len(run['unexpected'])} |")
        for number, run in enumerate(result["runs"], 1):
            for miss in run["unexpected"]:
                lines.append(f"- run {number}, {miss['student']} {miss['test']} ({miss['answer']}): expected "
                             f"{miss['expected']}, got {miss['got']}: {miss['message']}")
            for student, why in run["not_graded_plainly"].items():
                lines.append(f"- run {number}, {student}: {why}")
        lines.append("")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lesson", action="append", choices=LESSONS, help="default: both")
    parser.add_argument("--runs", type=int, default=3, help="runs in a row (default 3)")
    parser.add_argument("--jobs", type=int, default=2, help="students graded at a time (default 2)")
    args = parser.parse_args()
    results = json.loads(RESULT.read_text()) if RESULT.exists() else {}
    for lesson in args.lesson or LESSONS:
        results[lesson] = grade_lesson(lesson, args.runs, args.jobs)
        RESULT.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        RESULT.with_suffix(".md").write_text(render(results))
    missed = sum(len(run["unexpected"]) for result in results.values() for run in result["runs"])
    print(f"wrote {RESULT.relative_to(ROOT)}: {missed} grades not as expected", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
