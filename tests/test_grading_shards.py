"""Part of the corpus graded twice: once unsharded (tests/submissions/graded.py, shared with the corpus test) and
once as 4 shards run at the same time on this machine, then merged into a fresh course. The merged course must
hold the same scores, statuses and reasons, in grades.csv and in nbgrader's gradebook; merging again changes
nothing; a missing shard is named; a student graded differently in two shards is reported, not overwritten.

The sharded class is the correct students, the broken files and the submissions whose grading depends on a cap
or on a kernel that dies or forks: where the outcome could depend on timing, it must not depend on the shard."""
import shutil
import subprocess
import sys

import pytest

from tests.submissions import corpus
from tests.submissions.graded import REPO, gradebook_scores, normalised_rows, read_rows, zerolab

pytestmark = pytest.mark.slow
SHARDS = 4
CLASS = (*corpus.CORRECT, *corpus.FILE_CASES, "loop_top", "loop_ignores_interrupt", "fork_bomb", "os_exit",
         "allocates_4gb", "many_files")


@pytest.fixture(scope="module")
def sharded(graded_corpus, tmp_path_factory):
    course = tmp_path_factory.mktemp("sharded") / "course"
    corpus.write_course(course, REPO)
    for student in CLASS:
        shutil.copytree(graded_corpus.course / "submitted" / student, course / "submitted" / student)
    folders = [course.parent / f"shard-{number}" for number in range(1, SHARDS + 1)]
    listings = [_listing(course)]
    runs = [subprocess.Popen([sys.executable, "-m", "zerolab", "grade", corpus.LESSON, "--course", str(course),
                              "--shard", f"{number}/{SHARDS}", "--out", str(folder)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for number, folder in enumerate(folders, 1)]
    outputs = [run.communicate(timeout=1800)[0] for run in runs]
    listings.append(_listing(course))
    merged = zerolab("grade", "merge", corpus.LESSON, *folders, "--course", course)
    return course, folders, outputs, merged, listings


def _listing(folder):
    return {path.relative_to(folder): path.stat().st_mtime_ns for path in folder.rglob("*") if path.is_file()}


def test_shards_split_the_class_and_touch_nothing_in_the_course(sharded, graded_corpus):
    course, folders, outputs, merged, (before, after) = sharded
    assert after == before, "a shard wrote into the course"
    graded = [set(read_rows(folder)) for folder in folders]
    assert sum(len(names) for names in graded) == len(CLASS), outputs
    assert set().union(*graded) == set(CLASS)
    assert all(names for names in graded), "a shard of 4 got nobody: the split is not spread"


def test_merged_course_has_the_same_scores_statuses_and_reasons(sharded, graded_corpus):
    course, folders, outputs, merged, _ = sharded
    assert merged.returncode == 0, merged.stdout + merged.stderr
    merged_rows = normalised_rows(read_rows(course), course)
    single_rows = normalised_rows({student: graded_corpus.rows[student] for student in CLASS}, graded_corpus.course)
    assert set(merged_rows) == set(single_rows)
    different = [f"{student}: {key} {single_rows[student][key]!r} unsharded, {merged_rows[student][key]!r} merged"
                 for student in sorted(single_rows) for key in single_rows[student]
                 if merged_rows[student][key] != single_rows[student][key]]
    assert not different, "\n".join(different)
    # what formgrader and `nbgrader export` read
    assert gradebook_scores(course) == {student: score for student, score in graded_corpus.scores.items()
                                        if student in CLASS}


def test_merging_again_changes_nothing(sharded):
    course, folders, _, _, _ = sharded
    rows, scores = read_rows(course), gradebook_scores(course)
    again = zerolab("grade", "merge", corpus.LESSON, *folders, "--course", course)
    assert again.returncode == 0 and " 0 merged" in again.stdout, again.stdout + again.stderr
    assert (read_rows(course), gradebook_scores(course)) == (rows, scores)


def test_a_missing_shard_is_named(sharded):
    course, folders, _, _, _ = sharded
    partial = zerolab("grade", "merge", corpus.LESSON, *folders[:3], "--course", course)
    assert partial.returncode == 1 and f"shard 4/{SHARDS} is not among" in partial.stdout, partial.stdout


def test_a_student_graded_differently_in_two_shards_is_reported_not_overwritten(sharded, tmp_path):
    course, folders, _, _, _ = sharded
    rows = read_rows(folders[0])
    student = next(name for name, row in rows.items() if row["status"] == "graded")
    twin = tmp_path / "twin"
    shutil.copytree(folders[0], twin)
    text = (twin / "grades.csv").read_text().replace(f"{student},{corpus.LESSON},{rows[student]['score']},",
                                                     f"{student},{corpus.LESSON},0,")
    (twin / "grades.csv").write_text(text)
    before = read_rows(course)
    clash = zerolab("grade", "merge", corpus.LESSON, *folders, twin, "--course", course)
    assert clash.returncode == 1 and f"CONFLICT {student}: graded differently" in clash.stdout, clash.stdout
    assert read_rows(course) == before
