"""Broken and hostile submissions of lesson 01, each a small change to a correct notebook, with what grading
must say about it. `write_course(root)` builds a test course with every case and some correct students.

A correct submission scores FULL (the lesson's points, read from its source notebook). Scores below are what honest grading
gives: an exercise whose code never ran, or that cheats equality, earns nothing for its test.
"""
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat

from zerolab.grading.answers import with_solutions

LESSON = "01_where_memory_goes"
SOURCE = Path(__file__).resolve().parents[2] / "autograder" / "source" / LESSON / f"{LESSON}.ipynb"
POINTS = {c.metadata["nbgrader"]["grade_id"]: c.metadata["nbgrader"].get("points", 0)
          for c in nbformat.read(str(SOURCE), as_version=4).cells
          if c.metadata.get("nbgrader", {}).get("grade")}  # from the lesson itself, so a re-weighting cannot drift
FULL = sum(POINTS.values())
EX1 = POINTS["test_ex1_model_state_bytes"]
EX3 = POINTS["test_ex3_fraction_kept"]
EX4 = POINTS["test_ex4_deepspeed_zero2_gib"]
# Sized for 4 shards graded at once on a 2-core machine that also runs another test (pytest's second worker): the
# heaviest honest cell (~0.3 s of CPU since grading draws no figure and imports neither torch nor DeepSpeed; the
# whole notebook ~1.5 s with its kernel's start) must stay far below the per-cell cap even when a kernel gets a
# tenth of a core, and a notebook that loses one cell to that cap far below the per-notebook cap. Otherwise which
# cell a cap stops depends on the load, and the same submission is graded differently in two runs. Each second here
# is paid by every submission that meets a cap, several times per test session (the corpus, its shards, Slurm).
CAPS = {"cell_timeout": 15, "notebook_timeout": 60, "memory_limit": "2GiB", "max_processes": 64,
        "disk_limit": "64MiB"}
CORRECT = ("ok_alice", "ok_bob", "ok_carol", "ok_dave")


@dataclass
class Case:
    name: str
    change: callable  # change(notebook, folder) edits a correct notebook and/or writes files into the folder
    status: str
    score: float  # None: no score (failed, missing)
    reason: str  # a substring of the reason column


def cell(nb, grade_id):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def prepend(grade_id, code):
    def change(nb, folder):
        cell(nb, grade_id).source = code + "\n" + cell(nb, grade_id).source
    return change


def replace(grade_id, code):
    def change(nb, folder):
        cell(nb, grade_id).source = code
    return change


def append(code):
    def change(nb, folder):
        nb.cells.append(nbformat.v4.new_code_cell(code))
    return change


def both(*changes):
    def change(nb, folder):
        for one in changes:
            one(nb, folder)
    return change


def meta(grade_id, **values):
    def change(nb, folder):
        cell(nb, grade_id).metadata["nbgrader"].update(values)
    return change


def drop(grade_id):
    def change(nb, folder):
        nb.cells.remove(cell(nb, grade_id))
    return change


def duplicate(grade_id, source=None):
    def change(nb, folder):
        original = cell(nb, grade_id)
        copy = nbformat.from_dict(json.loads(json.dumps(original)))
        copy.id = original.id + "-copy"
        if source is not None:
            copy.source = source
        nb.cells.insert(nb.cells.index(original) + 1, copy)
    return change


def sleep_past_the_notebook_cap(nb, folder):
    """Code cells at the top that sleep past the per-notebook cap, each well under the per-cell cap, on a schedule
    counted from the first cell: the cap stops the last one whatever the load, as long as the kernel starts within
    half a minute of its launcher (a fixed sleep per cell would move the stop to another cell as start-up slows)."""
    cap, longest = CAPS["notebook_timeout"], CAPS["cell_timeout"] * 0.6
    last_start = cap - longest + 5  # the last cell ends 5 s after the cap: the cap falls inside it
    count = math.ceil(last_start / longest)
    ends = [last_start * number / count for number in range(1, count + 1)] + [cap + 5]
    cells = ["import time as _time\n_start = _time.monotonic()"] + [
        f"_time.sleep(max(0, _start + {end:.1f} - _time.monotonic()))" for end in ends]
    nb.cells[0:0] = [nbformat.v4.new_code_cell(source) for source in cells]


def write_file(relative, text):
    def change(nb, folder):
        (folder / relative).parent.mkdir(parents=True, exist_ok=True)
        (folder / relative).write_text(text)
    return change


WRONG_EX1 = 'def model_state_bytes(params):\n    return {"params": 1, "grads": 1, "master_weights": 1, "optimizer_states": 2}'
RIGGED_DICT = '''class _Always(dict):
    def __eq__(self, other):
        return True
    __hash__ = dict.__hash__

def model_state_bytes(params):
    return _Always(params=2 * params, grads=2 * params, master_weights=4 * params, optimizer_states=8 * params)'''
INT_SUBCLASS = '''class _Loose(float):
    def __eq__(self, other):
        return True
    __hash__ = float.__hash__

def deepspeed_zero2_gib(params, gpus):
    return _Loose(0.0)'''
READ_SOLUTIONS = '''import glob
for _path in ["../../../source/01_where_memory_goes/01_where_memory_goes.ipynb", "01_where_memory_goes.ipynb",
              "/work/main/solutions/01_where_memory_goes.ipynb"] + glob.glob("/tmp/**/*.ipynb", recursive=True) + \
             glob.glob("/work/*/solutions/*.ipynb") + glob.glob("/work/*/*/solutions/*.ipynb") + \
             glob.glob("/work/*/autograder/source/*/*.ipynb") + glob.glob("/root/*.ipynb"):
    try:
        _text = open(_path).read()
        print("READ", _path, "BEGIN HIDDEN" in _text, "SOLUTION" in _text)
    except OSError as _error:
        print("blocked", _path, type(_error).__name__)'''
WRITE_OTHERS = '''import glob, sqlite3
for _path in glob.glob("../*/01_where_memory_goes/*.ipynb") + ["../ok_alice/01_where_memory_goes/01_where_memory_goes.ipynb"]:
    try:
        open(_path, "w").write("{}")
        print("WROTE", _path)
    except OSError as _error:
        print("blocked", _path, type(_error).__name__)
try:
    _db = sqlite3.connect("../../../gradebook.db")
    _db.execute("update grade set manual_score = 100")
    _db.commit()
    print("WROTE gradebook")
except Exception as _error:
    print("blocked gradebook", type(_error).__name__)'''
NETWORK = '''import socket
try:
    socket.create_connection(("pypi.org", 443), timeout=3)
    print("CONNECTED")
except OSError as _error:
    print("blocked network", _error)'''
FORK_BOMB = '''import os
while True:
    try:
        os.fork()
    except OSError:
        pass'''
IGNORE_INTERRUPT = '''import time
while True:
    try:
        time.sleep(10)
    except KeyboardInterrupt:
        pass'''
# The wrong solution cells above, by exercise: `zerolab grade validate` runs them through the tests too.
WRONG_ANSWERS = {"ex1_model_state_bytes": [WRONG_EX1, RIGGED_DICT], "ex4_deepspeed_zero2_gib": [INT_SUBCLASS]}
PERMISSIVE_CHECKS = "def plain(value, name=None):\n    return value\n"
# Past the disk cap (CAPS: 64 MiB for the submission's folder and its /tmp together) every write fails.
MANY_FILES = '''import os
os.makedirs("junk", exist_ok=True)
for _number in range(10**6):
    with open(f"junk/{_number}.txt", "w") as _file:
        _file.write("x" * 100)'''
MANY_DIRECTORIES = '''import os
for _number in range(10**6):
    os.makedirs(f"tree/{_number // 1000}/{_number}")'''
FOLDER_AND_TMP = '''import os, tempfile
_chunk = b"x" * 2**20
for _where in (".", tempfile.gettempdir()):  # 40 MiB each: under the cap alone, past it together
    with open(os.path.join(_where, "big.bin"), "wb") as _file:
        for _ in range(40):
            _file.write(_chunk)
            _file.flush()'''

CASES = [
    Case("release_unchanged", lambda nb, folder: None, "graded", 0, ""),  # replaced below by the release itself
    Case("loop_top", prepend("ex1_model_state_bytes", "while True:\n    pass"), "graded", FULL - EX1,
         "per-cell cap"),
    Case("loop_ignores_interrupt", prepend("ex1_model_state_bytes", IGNORE_INTERRUPT), "review", FULL - EX1,
         "ignored the interrupt"),
    Case("sys_exit", prepend("ex1_model_state_bytes", "import sys\nsys.exit()"), "graded", FULL - EX1, ""),
    Case("os_exit", prepend("ex3_fraction_kept", "import os\nos._exit(1)"), "review", FULL - EX3, "ended the kernel"),
    Case("deleted_test_cell", drop("test_ex2_per_gpu_bytes"), "graded", FULL, ""),
    Case("edited_test_cell", both(replace("test_ex1_model_state_bytes", "pass"),
                                  replace("ex1_model_state_bytes", WRONG_EX1)), "graded", FULL - EX1, ""),
    Case("edited_test_points", both(replace("test_ex1_model_state_bytes", "pass"),
                                    replace("ex1_model_state_bytes", WRONG_EX1),
                                    meta("test_ex1_model_state_bytes", points=100, checksum="0" * 32)),
         "graded", FULL - EX1, "restored points"),
    Case("stripped_test_metadata", both(lambda nb, f: cell(nb, "test_ex1_model_state_bytes").metadata.pop("nbgrader"),
                                        replace("ex1_model_state_bytes", WRONG_EX1)), "graded", FULL - EX1, ""),
    Case("test_cell_to_markdown", lambda nb, f: setattr(cell(nb, "test_ex2_per_gpu_bytes"), "cell_type", "markdown")
         or cell(nb, "test_ex2_per_gpu_bytes").pop("outputs") and None, "graded", FULL, ""),
    Case("flipped_solution_flag", meta("test_ex1_model_state_bytes", solution=True), "graded", FULL,
         "restored solution"),
    Case("flipped_grade_flag", meta("test_ex2_per_gpu_bytes", grade=False), "graded", FULL, "restored grade"),
    Case("duplicated_test_cell", duplicate("test_ex2_per_gpu_bytes"), "graded", FULL, "copy of cell test_ex2"),
    Case("duplicated_solution_cell", both(duplicate("ex1_model_state_bytes"),
                                          replace("ex1_model_state_bytes", "raise NotImplementedError()")),
         "graded", FULL, "copy of cell ex1"),
    Case("rigged_eq_dict", replace("ex1_model_state_bytes", RIGGED_DICT), "graded", FULL - EX1, ""),
    Case("rigged_float_subclass", replace("ex4_deepspeed_zero2_gib", INT_SUBCLASS), "graded", FULL - EX4, ""),
    Case("patched_builtins", prepend("ex1_model_state_bytes", "import builtins\nbuiltins.abs = lambda x: 0"),
         "review", FULL, "builtins.abs"),
    # replaces the hidden tests' helper inside the kernel: flagged for review (the score is not trusted)
    Case("patched_checks", both(prepend("ex1_model_state_bytes", "import zerolab.lesson.checks\n"
                                        "zerolab.lesson.checks.plain = lambda value, name=None: value"),
                                replace("ex1_model_state_bytes", "import zerolab.lesson.checks\n"
                                        "zerolab.lesson.checks.plain = lambda value, name=None: value\n" + RIGGED_DICT)),
         "review", None, "zerolab.lesson.checks.plain"),
    Case("sys_modules", prepend("ex1_model_state_bytes", "import sys\nsys.modules['zerolab.lesson.checks'] = None"),
         "review", 0, "sys.modules"),  # every hidden test's import fails
    Case("shadowed_builtin", prepend("ex2_per_gpu_bytes", "len = lambda x: 4"), "review", FULL, "rebinds 'len'"),
    # blanks every later cell, tests included: undeserved marks that only a human review can catch
    Case("input_transformer", prepend("ex1_model_state_bytes",
                                      "get_ipython().input_transformers_cleanup.append(lambda lines: [])"),
         "review", None, "get_ipython"),
    Case("shadow_module_file", both(write_file("zerolab/__init__.py", ""), write_file("zerolab/lesson/checks.py",
                                                                                   PERMISSIVE_CHECKS),
                                    replace("ex1_model_state_bytes", RIGGED_DICT)),
         "review", FULL - EX1, "submitted Python code"),
    Case("reads_solutions", append(READ_SOLUTIONS), "review", FULL, "outside its own folder"),
    Case("writes_other_students", append(WRITE_OTHERS), "review", FULL, "outside its own folder"),
    Case("network", append(NETWORK), "review", FULL, "network"),
    Case("fork_bomb", append(FORK_BOMB), "review", FULL, "os.fork"),
    Case("allocates_4gb", prepend("ex1_model_state_bytes", "_big = bytearray(4 * 2**30)"), "graded", FULL - EX1,
         "out of memory"),
    # 50 times the output cap (a 50 MB line took nbclient 4 s of CPU: past the caps on a loaded machine)
    Case("prints_5mb_line", append('print("x" * 5_000_000)'), "graded", FULL, ""),
    Case("notebook_too_long", sleep_past_the_notebook_cap, "failed", None, "per-notebook cap"),
    Case("many_files", append(MANY_FILES), "review", FULL, "disk cap"),
    Case("many_directories", append(MANY_DIRECTORIES), "review", FULL, "disk cap"),
    Case("fills_folder_and_tmp", append(FOLDER_AND_TMP), "review", FULL, "disk cap"),
    Case("bad_kernelspec", lambda nb, f: nb.metadata.update(kernelspec={"name": "nonexistent-kernel",
                                                                        "display_name": "x", "language": "python"}),
         "graded", FULL, ""),
]
# Cases that are not a change to a notebook: the file itself is broken, renamed, old, or absent.
FILE_CASES = {
    "invalid_json": ("failed", None, "not a readable notebook"),
    "renamed_notebook": ("review", FULL, "was named"),
    "nbformat_4_4": ("graded", FULL, ""),
    "folder_without_notebook": ("missing", None, "no notebook"),
    "other_lesson_only": ("missing", None, "no folder"),
}


def correct_notebook(course):
    """The release notebook with every solution cell taken from the instructor's source."""
    release = nbformat.read(course / "release" / LESSON / f"{LESSON}.ipynb", as_version=4)
    source = nbformat.read(course / "source" / LESSON / f"{LESSON}.ipynb", as_version=4)
    return with_solutions(release, source)


def write_submissions(course):
    """Every case and the correct students under course/submitted/; returns {student: (status, score, reason)}."""
    expected = {}
    submitted = course / "submitted"
    for name in CORRECT:
        _save(correct_notebook(course), submitted / name / LESSON)
        expected[name] = ("graded", FULL, "")
    for case in CASES:
        folder = submitted / case.name / LESSON
        folder.mkdir(parents=True, exist_ok=True)
        nb = correct_notebook(course)
        if case.name == "release_unchanged":
            nb = nbformat.read(course / "release" / LESSON / f"{LESSON}.ipynb", as_version=4)
        case.change(nb, folder)
        _save(nb, folder)
        expected[case.name] = (case.status, case.score, case.reason)
    good = correct_notebook(course)
    (submitted / "invalid_json" / LESSON).mkdir(parents=True)
    (submitted / "invalid_json" / LESSON / f"{LESSON}.ipynb").write_text("{this is not json")
    (submitted / "renamed_notebook" / LESSON).mkdir(parents=True)
    nbformat.write(good, submitted / "renamed_notebook" / LESSON / f"{LESSON}-Copy1.ipynb")
    old = json.loads(nbformat.writes(good))
    old["nbformat_minor"] = 4
    for c in old["cells"]:
        c.pop("id", None)
    (submitted / "nbformat_4_4" / LESSON).mkdir(parents=True)
    (submitted / "nbformat_4_4" / LESSON / f"{LESSON}.ipynb").write_text(json.dumps(old))
    (submitted / "folder_without_notebook" / LESSON).mkdir(parents=True)
    (submitted / "folder_without_notebook" / LESSON / "notes.txt").write_text("forgot the notebook")
    (submitted / "other_lesson_only" / "04_writing_the_config").mkdir(parents=True)
    expected.update(FILE_CASES)
    return expected


def _save(nb, folder):
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / f"{LESSON}.ipynb")


def write_course(root, repository):
    """A course folder like autograder/ with lesson 01 only and the small caps of CAPS."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(repository / "autograder" / "nbgrader_config.py", root / "nbgrader_config.py")
    shutil.copytree(repository / "autograder" / "source" / LESSON, root / "source" / LESSON)
    with open(root / "nbgrader_config.py", "a") as config:
        config.write("\n# test caps, small so the hostile corpus runs in a few minutes\n")
        for key, value in CAPS.items():
            config.write(f"c.ZeroLab.{key} = {value!r}\n")
