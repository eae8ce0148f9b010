"""Fast checks of sharded grading that need no kernel: the split, the uid leases, the disk cap's tmpfs, the
`grade merge` / `grade export` command line, and the Canvas export from a gradebook built with nbgrader's API."""
import csv
import io
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from zerolab.cli.main import main
from zerolab.errors import UserError
from zerolab.grading import diskcap, shards, uids

STUDENTS = [f"s{number:04d}" for number in range(500)] + ["alice", "bob", "Zoë", "x" * 64]


def test_every_student_is_in_exactly_one_shard_whatever_the_order():
    split = {name: shards.owner(name, 4) for name in STUDENTS}
    shuffled = random.Random(7).sample(STUDENTS, len(STUDENTS))
    assert {name: shards.owner(name, 4) for name in shuffled} == split
    sizes = [list(split.values()).count(number) for number in range(1, 5)]
    assert set(split.values()) == {1, 2, 3, 4} and min(sizes) > 0.7 * len(STUDENTS) / 4, sizes


def test_the_split_is_the_same_in_another_process_with_another_hash_seed():
    code = "from zerolab.grading import shards; print([shards.owner(f's{n:04d}', 7) for n in range(50)])"
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(outputs) == 1
    assert outputs.pop().strip() == str([shards.owner(f"s{n:04d}", 7) for n in range(50)])


@pytest.mark.parametrize("text", ["0/4", "5/4", "1", "a/b", "1/2/3", "-1/4"])
def test_bad_shards_are_refused(text):
    with pytest.raises(UserError, match="--shard"):
        shards.parse(text)


FIRST = 62500  # away from the uids real grading runs lease


def test_two_leases_never_share_a_uid_and_a_closed_lease_is_free_again(tmp_path):
    one = uids.allocate(tmp_path, first=FIRST, count=5)
    two = uids.allocate(tmp_path, first=FIRST, count=5)
    assert one.uid != two.uid
    one.release()
    assert uids.allocate(tmp_path, first=FIRST, count=5).uid == one.uid


def test_a_uid_locked_by_another_process_is_skipped(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from zerolab.grading import uids; "
                               f"lease = uids.allocate(sys.argv[1], first={FIRST}, count=5); print(lease.uid, "
                               "flush=True); time.sleep(60)", str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        held = int(holder.stdout.readline())
        assert uids.allocate(tmp_path, first=FIRST, count=5).uid != held
    finally:
        holder.kill()
        holder.wait()
    assert uids.allocate(tmp_path, first=FIRST, count=5).uid == held  # the lock died with its process


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a process as another uid")
def test_a_uid_a_process_still_runs_as_is_skipped(tmp_path):
    from zerolab.grading.sandbox import _drop_to

    stray = subprocess.Popen(_drop_to(FIRST) + ["sleep", "60"])
    try:
        for _ in range(100):
            if FIRST in uids.uids_in_use():
                break
        assert uids.allocate(tmp_path, first=FIRST, count=5).uid == FIRST + 1
    finally:
        stray.kill()
        stray.wait()


def _can_mount():
    if os.geteuid() != 0:
        return False
    done = subprocess.run([diskcap._system("unshare"), "--mount", "true"], capture_output=True)
    return done.returncode == 0


@pytest.mark.skipif(not _can_mount(), reason="mounting a tmpfs needs root with CAP_SYS_ADMIN")
def test_the_disk_cap_counts_the_folder_and_tmp_together_and_many_empty_files(tmp_path):
    """The helper's real tmpfs: 2 MiB for both; 1.5 MiB in each fails in the second; empty files run out too."""
    workdir, top = tmp_path / "work", tmp_path / "mount"
    workdir.mkdir()
    top.mkdir()
    (workdir / "data.txt").write_text("kept")
    (workdir / "nb.ipynb").write_text("{}")
    (tmp_path / "kernel.json").write_text("{}")
    probe = f'''
import os
print(sorted(os.listdir("{top}/work")), sorted(os.listdir("{top}/tmp")))
for where in ("{top}/work", "{top}/tmp"):
    try:
        with open(where + "/big", "wb") as handle:
            handle.write(b"x" * (3 * 2**19))
        print("wrote", os.path.basename(where))
    except OSError as error:
        print("full", os.path.basename(where), error.errno)
count = 0
try:
    while True:
        open(f"{top}/work/{{count}}", "w").close()
        count += 1
except OSError as error:
    print("files", count, error.errno)
'''
    spec = {"mount": str(top), "size": 2 * 2**20, "uid": os.getuid(), "workdir": str(workdir),
            "connection_file": str(tmp_path / "kernel.json")}
    done = subprocess.run(diskcap.command(spec, [sys.executable, "-c", probe]), capture_output=True, text=True,
                          timeout=60)
    lines = done.stdout.splitlines()
    assert lines[:3] == ["['data.txt'] ['kernel.json']", "wrote work", "full tmp 28"], done.stdout + done.stderr
    assert lines[3].startswith("files ") and lines[3].endswith(" 28")
    inodes = int(diskcap.mount_options(spec["size"]).split("nr_inodes=")[1].split(",")[0])
    assert int(lines[3].split()[1]) < inodes  # empty files take no bytes: the inode cap stopped them
    assert os.listdir(top) == [] and sorted(os.listdir(workdir)) == ["data.txt", "nb.ipynb"]  # nothing left here


@pytest.mark.parametrize("argv", [
    ["grade", "merge", "01_where_memory_goes"],
    ["grade", "merge", "01_where_memory_goes", "/nonexistent/shard"],
    ["grade", "export", "01_where_memory_goes"],
    ["grade", "export", "01_where_memory_goes", "--format", "pdf"],
    ["grade", "01_where_memory_goes", "--out", "somewhere"],
    ["grade", "01_where_memory_goes", "--shard", "3/2"],
])
def test_bad_input_is_one_line_and_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("zerolab: error: ") and err.count("\n") == 1, err


def test_merge_refuses_shards_of_different_splits(tmp_path, capsys):
    for name, count in (("a", 2), ("b", 3)):
        (tmp_path / name).mkdir()
        shards.write_record(tmp_path / name, lesson="01_where_memory_goes", shard=1, of=count, students=[],
                            finished=True)
    course = Path(__file__).resolve().parents[1] / "autograder"
    assert main(["grade", "merge", "01_where_memory_goes", str(tmp_path / "a"), str(tmp_path / "b"),
                 "--course", str(course)]) == 2
    assert "different splits" in capsys.readouterr().err


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A gradebook made with nbgrader's API: lesson L worth 10, ann scored 7, bob failed, cy never submitted."""
    from nbgrader.api import Gradebook

    tmp_path = tmp_path_factory.mktemp("gradebook")
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:
        gradebook.add_assignment("L")
        gradebook.add_notebook("L", "L")
        gradebook.add_grade_cell("test_a", "L", "L", max_score=6, cell_type="code")
        gradebook.add_grade_cell("test_b", "L", "L", max_score=4, cell_type="code")
        gradebook.add_student("ann", first_name="Ann", last_name="Lee", lms_user_id="1001")
        gradebook.add_student("bob")
        gradebook.add_student("cy", first_name="Cy")
        for student in ("ann", "bob"):
            gradebook.add_submission("L", student)
        grade = gradebook.find_grade("test_a", "L", "L", "ann")
        grade.auto_score, grade.needs_manual_grade = 6, False
        grade = gradebook.find_grade("test_b", "L", "L", "ann")
        grade.auto_score, grade.manual_score, grade.needs_manual_grade = 0, 1, False  # formgrader's manual grade
        gradebook.db.commit()
    (tmp_path / "grades.csv").write_text("student,lesson,score,max_score,status,reason\n"
                                         "ann,L,6,10,graded,\nbob,L,,10,failed,not a readable notebook\n")
    return tmp_path


def _export(course, fmt, capsys):
    assert main(["grade", "export", "L", "--format", fmt, "--course", str(course), "--output", "-"]) == 0
    return list(csv.reader(io.StringIO(capsys.readouterr().out)))


def test_canvas_export_has_canvas_columns_points_and_no_silent_zero(course, capsys):
    rows = _export(course, "canvas", capsys)
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "L"]
    assert rows[1] == ["    Points Possible", "", "", "", "", "10"]
    assert rows[2:] == [["Lee, Ann", "1001", "", "ann", "", "7"],  # the manual grade counts
                        ["bob", "", "", "bob", "", ""],  # failed: empty, not 0
                        ["Cy", "", "", "cy", "", ""]]  # never submitted


def test_csv_export_says_each_students_status(course, capsys):
    rows = _export(course, "csv", capsys)
    table = {row[0]: dict(zip(rows[0], row)) for row in rows[1:]}
    assert (table["ann"]["score"], table["ann"]["status"]) == ("7", "graded")
    assert (table["bob"]["score"], table["bob"]["status"]) == ("", "failed")
    assert (table["cy"]["score"], table["cy"]["status"]) == ("", "missing")
