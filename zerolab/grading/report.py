"""The outcome of grading one student, read from nbgrader's gradebook, and grades.csv.

status: graded  (score from the gradebook)
        review  (graded, but a human should look: the reason says what)
        failed  (no score: the reason says why and what to do; never a silent 0)
        missing (nothing submitted)
"""
import csv
from dataclasses import dataclass, field

COLUMNS = ("student", "lesson", "score", "max_score", "status", "reason")


@dataclass
class Outcome:
    student: str
    lesson: str
    status: str = ""
    score: float = None
    max_score: float = None
    notes: list = field(default_factory=list)  # said in the reason; do not change the status
    review: list = field(default_factory=list)  # each one makes a graded submission "review"
    seconds: float = 0.0

    def final_status(self):
        if self.status:
            return self.status
        return "review" if self.review else "graded"

    def reason(self):
        return "; ".join(self.review + self.notes)

    def as_dict(self):
        return {"student": self.student, "lesson": self.lesson, "score": self.score, "max_score": self.max_score,
                "status": self.final_status(), "reason": self.reason(), "seconds": round(self.seconds, 2)}


def read_scores(course, student, lesson, outcome, limits):
    """Score and max score from the gradebook; notes on cells that hit a cap; review for manual grading."""
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course.gradebook}") as gradebook:
        submission = gradebook.find_submission(lesson, student)
        outcome.score, outcome.max_score = float(submission.score), float(submission.max_score)
        manual = [grade.name for notebook in submission.notebooks for grade in notebook.grades
                  if grade.needs_manual_grade]
    if manual:
        outcome.review.append(f"needs manual grading in formgrader: {', '.join(manual)}")
    notes, review = cap_notes(course.autograded(student, lesson) / f"{lesson}.ipynb", limits)
    outcome.notes += notes
    outcome.review += review


# What a write past the disk cap raises: the tmpfs is full (files or inodes), or one file passed RLIMIT_FSIZE.
DISK_FULL = ("[Errno 28]", "No space left on device", "[Errno 27]", "File too large")


def cap_notes(path, limits):
    """(notes, review): 'cell X ...' for cells of the executed notebook stopped by a cap. The memory and time
    caps stop honest but slow or greedy code (a note); filling the disk is never needed (a human looks)."""
    import nbformat

    if not path.exists():
        return [], []
    notes, review = [], []
    for index, cell in enumerate(nbformat.read(path, as_version=4).cells, 1):
        label = cell.metadata.get("nbgrader", {}).get("grade_id") or f"#{index}"
        errors = [output for output in cell.get("outputs", []) if output.get("output_type") == "error"]
        names = {output.get("ename") for output in errors}
        if "MemoryError" in names:
            notes.append(f"cell {label} ran out of memory (cap {limits.memory_limit / 2**30:.3g} GiB)")
        if names & {"CellTimeoutError", "KeyboardInterrupt"}:
            notes.append(f"cell {label} was stopped at the {limits.cell_timeout} s per-cell cap")
        if any(mark in str(output.get("evalue", "")) for output in errors for mark in DISK_FULL):
            review.append(f"cell {label} wrote past the {limits.disk_limit / 2**30:.3g} GiB disk cap (its folder "
                          "and /tmp together); its writes failed")
    return notes, review


def max_score(course, lesson):
    from nbgrader.api import Gradebook, MissingEntry

    try:
        with Gradebook(f"sqlite:///{course.gradebook}") as gradebook:
            return float(gradebook.find_assignment(lesson).max_score)
    except MissingEntry:
        return None


def last_error_line(result):
    """The most telling line of an nbgrader API result: its last ERROR log line or exception line."""
    lines = [line.strip() for line in f"{result.get('log', '')}\n{result.get('error', '')}".splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or line.startswith("ERROR")]
    text = (errors or lines or ["unknown error"])[-1]
    return text[:300]


def write_csv(path, rows, lesson):
    """grades.csv keeps other lessons' rows and replaces this lesson's."""
    kept = []
    if path.exists():
        with open(path, newline="") as handle:
            kept = [row for row in csv.DictReader(handle) if row.get("lesson") != lesson]
    rows = sorted(kept + [{key: _cell(row.get(key)) for key in COLUMNS} for row in rows],
                  key=lambda row: (row["lesson"], row["student"]))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"
    return value


def merge_csv(path, rows):
    """grades.csv with `rows` in place of the rows of the same lesson and student; every other row kept."""
    replaced = {(row["lesson"], row["student"]) for row in rows}
    kept = []
    if path.exists():
        with open(path, newline="") as handle:
            kept = [row for row in csv.DictReader(handle) if (row.get("lesson"), row.get("student")) not in replaced]
    rows = sorted(kept + [{key: _cell(row.get(key)) for key in COLUMNS} for row in rows],
                  key=lambda row: (row["lesson"], row["student"]))
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
