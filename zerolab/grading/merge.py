"""zerolab grade merge LESSON DIR...: fold shard folders into the course, through nbgrader's Gradebook API."""
import csv
import shutil
import warnings
from pathlib import Path

from zerolab.errors import UserError

DESCRIPTION = """Fold the results of `zerolab grade LESSON --shard K/N --out DIR` into the course: its gradebook.db
(through nbgrader's Gradebook API, so formgrader and `nbgrader export` see every student), autograded/,
feedback/, the logs and grades.csv.

Merging is idempotent: a shard merged twice changes nothing. A student whose result differs between two
shards, or from what the course already holds (a manual grade in formgrader, an earlier merge), is reported
and left as the course has it; --overwrite takes the shard's result over the course's (after regrading).
A shard of the split that is not among DIR..., or that did not finish, is named; the exit status is then 1.
"""


def add_arguments(parser):
    parser.add_argument("lesson", help="the lesson the shards graded")
    parser.add_argument("folders", nargs="+", metavar="DIR", help="shard folders (the --out of each shard)")
    parser.add_argument("--course", default="autograder", help="the nbgrader course folder (default: autograder)")
    parser.add_argument("--overwrite", action="store_true",
                        help="take a shard's result over a different one already in the course")


def run(args):
    from sqlalchemy.exc import SAWarning

    from zerolab.grading import report, shards
    from zerolab.grading.coursedir import Course
    from zerolab.grading.release import ensure_assignment

    course = Course(Path(args.course).resolve())
    if not course.source_notebook(args.lesson).exists():
        raise UserError(f"no source notebook {course.source_notebook(args.lesson)}; is --course the course folder?")
    records = [(Path(folder).resolve(), shards.read_record(folder)) for folder in args.folders]
    for folder, record in records:
        if record["lesson"] != args.lesson:
            raise UserError(f"{folder} holds a shard of {record['lesson']}, not of {args.lesson}")
    splits = {record["of"] for _, record in records}
    if len(splits) > 1:
        raise UserError(f"the folders come from different splits ({', '.join(f'of {n}' for n in sorted(splits))}); "
                        "merge the shards of one split")
    count = splits.pop()
    unfinished = [folder for folder, record in records if not record.get("finished")]
    done = [(folder, record) for folder, record in records if record.get("finished")]
    missing = sorted(set(range(1, count + 1)) - {record["shard"] for _, record in records})
    ensure_assignment(course, args.lesson)
    found = {}  # student -> [(folder, result)]
    for folder, record in done:
        _same_lesson(course, folder, args.lesson)
        for student, result in _results(folder, record, course, args.lesson).items():
            found.setdefault(student, []).append((folder, result))
    conflicts, written, unchanged = [], [], 0
    rows = []
    held_rows = _rows(course.root / "grades.csv", args.lesson)
    with _gradebook(course.gradebook) as gradebook, warnings.catch_warnings():
        warnings.simplefilter("ignore", SAWarning)  # nbgrader's own add_submission trips it (nbgrader #1473)
        for student, candidates in sorted(found.items()):
            first_folder, result = candidates[0]
            others = [folder for folder, other in candidates[1:] if other != result]
            if others:
                conflicts.append(f"{student}: graded differently in {first_folder} and {others[0]}; "
                                 "left as the course has it")
                continue
            entries = _entries(gradebook, args.lesson, student)
            held = None if student not in held_rows and entries["submission"] is None else {
                "row": held_rows.get(student), **entries}
            if held == result:
                unchanged += 1
                continue
            if held is not None and not args.overwrite:
                conflicts.append(f"{student}: the course already holds a different result ({_summary(held)}) than "
                                 f"{first_folder} ({_summary(result)}); kept the course's (--overwrite takes the "
                                 "shard's)")
                continue
            _write(gradebook, course, args.lesson, student, result, first_folder)
            rows.append(result["row"])
            written.append(student)
    report.merge_csv(course.root / "grades.csv", rows)
    print(f"zerolab grade merge {args.lesson}: {len(done)} shard(s) of {count}, {len(found)} students: "
          f"{len(written)} merged, {unchanged} already in the course, {len(conflicts)} in conflict; "
          f"wrote {course.gradebook} and {course.root / 'grades.csv'}")
    for line in conflicts:
        print(f"CONFLICT {line}")
    for folder in unfinished:
        record = shards.read_record(folder)
        print(f"NOT FINISHED: {folder} (shard {record['shard']}/{count}) did not finish grading: its "
              f"{len(record.get('students', []))} students are not merged{_fate(record.get('task'))}; grade the "
              "shard again into the same folder, then merge")
    for number in missing:
        print(f"MISSING: shard {number}/{count} is not among the folders given; its students are not merged")
    return 1 if conflicts or missing or unfinished else 0


def _same_lesson(course, folder, lesson):
    """The shard was graded against the course's version of the lesson (same cells, points, checksums)."""
    if _cells(course.gradebook, lesson) != _cells(folder / "gradebook.db", lesson):
        raise UserError(f"{folder} was graded against another version of {lesson} than the course's gradebook "
                        f"holds; grade that shard again (after `zerolab grade {lesson} --release` if the lesson "
                        "changed)")


def _cells(database, lesson):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{database}") as gradebook:
        assignment = gradebook.find_assignment(lesson)
        return sorted([(notebook.name, "points", cell.name, cell.max_score)
                       for notebook in assignment.notebooks for cell in notebook.grade_cells]
                      + [(notebook.name, "checksum", cell.name, cell.checksum)
                         for notebook in assignment.notebooks for cell in notebook.source_cells])


def _results(folder, record, course, lesson):
    """{student: result} of one shard: its gradebook entries and its grades.csv row, paths made the course's
    (the shard's folder as it was named where it ran, on a scheduler's node, and as it is named here)."""
    rows = _rows(folder / "grades.csv", lesson)
    results = {}
    with _gradebook(folder / "gradebook.db") as gradebook:
        for student in record["students"]:
            if student not in rows:
                continue  # the shard stopped before this student; their row is what says they were graded
            row = {key: _moved(value, [record.get("folder"), str(folder)], str(course.root))
                   for key, value in rows[student].items()}
            results[student] = {"row": row, **_entries(gradebook, lesson, student)}
    return results


def _moved(text, old, new):
    for prefix in filter(None, old):
        text = text.replace(prefix, new)
    return text


def _rows(path, lesson):
    if not path.exists():
        return {}
    with open(path, newline="") as handle:
        return {row["student"]: row for row in csv.DictReader(handle) if row["lesson"] == lesson}


def _gradebook(path):
    from nbgrader.api import Gradebook

    return Gradebook(f"sqlite:///{path}")


def _entries(gradebook, lesson, student):
    """What nbgrader holds about one student's submission, as plain data."""
    from nbgrader.api import MissingEntry

    try:
        person = gradebook.find_student(student)
        who = {"first_name": person.first_name, "last_name": person.last_name, "email": person.email,
               "lms_user_id": person.lms_user_id}
    except MissingEntry:
        who = None
    try:
        submission = gradebook.find_submission(lesson, student)
    except MissingEntry:
        return {"student": who, "submission": None}
    notebooks = {}
    for notebook in submission.notebooks:
        notebooks[notebook.name] = {
            "flagged": notebook.flagged, "late_submission_penalty": notebook.late_submission_penalty,
            "grades": {grade.name: (grade.auto_score, grade.manual_score, grade.extra_credit,
                                    grade.needs_manual_grade) for grade in notebook.grades},
            "comments": {comment.name: (comment.auto_comment, comment.manual_comment)
                         for comment in notebook.comments}}
    return {"student": who, "submission": {"timestamp": submission.timestamp, "extension": submission.extension,
                                           "notebooks": notebooks}}


def _summary(result):
    row = result.get("row") or {}
    return f"{row.get('status', '?')} {row.get('score') or '-'}"


def _write(gradebook, course, lesson, student, result, folder):
    """The shard's result for one student into the course: gradebook, files, log."""
    submission = result["submission"]
    if result["student"] is not None or submission is not None:  # as unsharded grading leaves it
        gradebook.update_or_create_student(student, **(result["student"] or {}))
    if submission is None:
        from nbgrader.api import MissingEntry

        try:
            gradebook.remove_submission(lesson, student)
        except MissingEntry:
            pass
    else:
        extra = {key: submission[key] for key in ("timestamp", "extension") if submission[key] is not None}
        made = gradebook.update_or_create_submission(lesson, student, **extra)
        for notebook in made.notebooks:
            values = submission["notebooks"][notebook.name]
            notebook.flagged = values["flagged"]
            notebook.late_submission_penalty = values["late_submission_penalty"]
            for grade in notebook.grades:
                (grade.auto_score, grade.manual_score, grade.extra_credit,
                 grade.needs_manual_grade) = values["grades"][grade.name]
            for comment in notebook.comments:
                comment.auto_comment, comment.manual_comment = values["comments"][comment.name]
        gradebook.db.commit()
    for kind in ("autograded", "feedback"):
        _replace(folder / kind / student / lesson, course.root / kind / student / lesson)
    _replace(folder / "zerolab-grading" / "logs" / lesson / f"{student}.log", course.log(student, lesson))


def _replace(source, target):
    if target.is_dir():
        shutil.rmtree(target)
    elif target.exists():
        target.unlink()
    if source.is_dir():
        shutil.copytree(source, target)
    elif source.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def _fate(task):
    """Where to read why a scheduler's task ended early (killed, out of time, out of memory)."""
    if not task:
        return ""
    if task.startswith("Slurm job "):
        job = task.removeprefix("Slurm job ")
        return f" ({task}: `sacct -j {job}` says whether it failed, was cancelled or ran out of time)"
    if task.startswith("Kubernetes pod "):
        return f" ({task}: `kubectl describe pod {task.removeprefix('Kubernetes pod ')}` says why it ended)"
    return f" ({task})"
