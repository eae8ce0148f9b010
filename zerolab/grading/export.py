"""zerolab grade export LESSON --format canvas|csv: the gradebook's scores of one lesson, for an LMS."""
import csv
import sys
from pathlib import Path

from zerolab.errors import UserError

DESCRIPTION = """Write one lesson's scores from the course's gradebook.db (manual grades made in formgrader included)
as a CSV file an LMS imports.

--format canvas   Canvas's gradebook import: Student, ID, SIS User ID, SIS Login ID, Section, then one
                  column named after the lesson (or --column), and a "Points Possible" row. nbgrader's
                  student record maps to it so:
                    Student       "last_name, first_name" (the student id when the gradebook has no names)
                    ID            lms_user_id (the Canvas user id, when the roster came from Canvas/LTI)
                    SIS User ID   left empty (nbgrader has no such field)
                    SIS Login ID  the nbgrader student id (the login the students submitted under)
                    Section       left empty
                  Canvas matches each row by ID, else SIS User ID, else SIS Login ID.
--format csv      student_id, first_name, last_name, email, lms_user_id, lesson, score, max_score, status,
                  needs_manual_grade.

A submission that `zerolab grade` could not grade (status failed) or that is missing gets an empty score,
never a 0: an empty cell leaves the LMS's grade as it is.
"""
CANVAS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
PLAIN = ("student_id", "first_name", "last_name", "email", "lms_user_id", "lesson", "score", "max_score", "status",
         "needs_manual_grade")


def add_arguments(parser):
    parser.add_argument("lesson", help="the lesson to export")
    parser.add_argument("--format", required=True, choices=("canvas", "csv"), help="canvas or csv")
    parser.add_argument("--course", default="autograder", help="the nbgrader course folder (default: autograder)")
    parser.add_argument("--output", metavar="FILE",
                        help="where to write (default COURSE/export/LESSON-FORMAT.csv; - for standard output)")
    parser.add_argument("--column", help="the Canvas assignment column's name (default: the lesson's name)")


def run(args):
    from zerolab.grading.coursedir import Course

    course = Course(Path(args.course).resolve())
    if not course.gradebook.exists():
        raise UserError(f"no gradebook at {course.gradebook}; grade (or merge) the lesson first")
    best, rows = scores(course, args.lesson)
    if args.format == "canvas":
        header = [*CANVAS, args.column or args.lesson]
        lines = [header, ["    Points Possible", "", "", "", "", _number(best)]]
        lines += [[_name(row), row["lms_user_id"] or "", "", row["student_id"], "", _number(row["score"])]
                  for row in rows]
    else:
        lines = [list(PLAIN)] + [[_number(row[key]) if key in ("score", "max_score") else row[key] for key in PLAIN]
                                 for row in rows]
    output = args.output or str(course.root / "export" / f"{args.lesson}-{args.format}.csv")
    if output == "-":
        csv.writer(sys.stdout).writerows(lines)
    else:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
        with open(output, "w", newline="") as handle:
            csv.writer(handle).writerows(lines)
        print(f"wrote {output}: {len(rows)} students of {args.lesson} ({args.format})")
    return 0


def scores(course, lesson):
    """(max score, one dict per student the gradebook knows: who, score (None when failed or missing), status)."""
    from nbgrader.api import Gradebook, MissingEntry

    statuses = {}
    if (course.root / "grades.csv").exists():
        with open(course.root / "grades.csv", newline="") as handle:
            statuses = {row["student"]: row["status"] for row in csv.DictReader(handle) if row["lesson"] == lesson}
    rows = []
    with Gradebook(f"sqlite:///{course.gradebook}") as gradebook:
        try:
            best = float(gradebook.find_assignment(lesson).max_score)
        except MissingEntry:
            raise UserError(f"the gradebook has no lesson {lesson!r}; grade (or merge) it first") from None
        for student in sorted(gradebook.students, key=lambda s: s.id):
            try:
                submission = gradebook.find_submission(lesson, student.id)
            except MissingEntry:
                submission = None
            status = statuses.get(student.id) or ("graded" if submission is not None else "missing")
            score = float(submission.score) if submission is not None and status not in ("failed", "missing") else None
            manual = submission is not None and any(grade.needs_manual_grade for notebook in submission.notebooks
                                                    for grade in notebook.grades)
            rows.append({"student_id": student.id, "first_name": student.first_name or "",
                         "last_name": student.last_name or "", "email": student.email or "",
                         "lms_user_id": student.lms_user_id or "", "lesson": lesson, "score": score,
                         "max_score": best, "status": status, "needs_manual_grade": "yes" if manual else ""})
    return best, rows


def _name(row):
    names = [part for part in (row["last_name"], row["first_name"]) if part]
    return ", ".join(names) if names else row["student_id"]


def _number(value):
    return "" if value is None or value == "" else f"{float(value):g}"
