"""The grading validation's committed reports (autograder/validation/) and the sample of it CI runs.

The full reports come from `zerolab grade validate --all` (about half an hour on 2 cores); here every lesson's
report must be fresh (made from the lesson's tests as they are now), complete and above the bar, and a sample of
every lesson, run again, must meet the bar and agree with its report mutant by mutant.
"""
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from zerolab.grading import validate, validate_report
from zerolab.grading.variants import exercises

ROOT = Path(__file__).resolve().parent.parent

# The sample CI runs on every change: one exercise or two per lesson (lesson 08's on real ranks, DeepSpeed's among
# them), a few mutants each, the exercise's hand-written answers, the reference 5 times. The full report is `zerolab grade validate --all`, committed in autograder/validation.
SAMPLE = {"01_where_memory_goes": ["ex2_per_gpu_bytes"], "02_offload": ["ex3_pcie_bytes"],
          "03_overlap_comm": ["ex2_wire_bytes"], "04_writing_the_config": ["ex1_build_config"],
          "05_config_doctor": ["ex2_fix_config"], "06_predict_then_measure": ["ex1_optimizer_bytes"],
          "07_interview_drill": ["ex5_zero2_13b", "ex16_fsdp"], "08_zero_from_scratch": ["ex4_stage1_config"],
          "09_checkpoints": ["ex4_zero3_save_config"], "10_zero_in_2026": ["ex1_state_bytes"]}
# Lesson 08's exercise trains real ranks for every run: its sample is smaller (about 30 s instead of 65 s on 2 cores).
RUNS_AND_MUTANTS = {"08_zero_from_scratch": (3, 3)}
REPORTS = ROOT / "autograder" / "validation"


def committed(lesson):
    return json.loads((REPORTS / f"{lesson}.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("lesson", sorted(SAMPLE))
def test_a_sample_of_each_lesson_meets_the_bar_and_agrees_with_the_committed_report(tmp_path, lesson):
    chosen = [arg for grade_id in SAMPLE[lesson] for arg in ("--exercise", grade_id)]
    runs, mutants = RUNS_AND_MUTANTS.get(lesson, (5, 5))
    done = subprocess.run([sys.executable, "-m", "zerolab", "grade", "validate", lesson, *chosen, "--runs", str(runs),
                           "--max-mutants", str(mutants), "--jobs", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    sample = json.loads((tmp_path / f"{lesson}.json").read_text())
    full = {(e["grade_id"], r["label"]): r["passed"] for e in committed(lesson)["exercises"] for r in e["variants"]
            if r["kind"] == "mutant"}
    compared = 0
    for exercise in sample["exercises"]:
        for row in exercise["variants"]:
            key = (exercise["grade_id"], row["label"])
            if row["kind"] == "mutant" and key in full:  # a lesson whose report is a sample may not hold it
                assert full[key] == row["passed"], \
                    f"{lesson} {exercise['grade_id']}: the committed report disagrees on {row['label']}"
                compared += 1
    assert compared, f"{lesson}: none of the sample's mutants is in the committed report"


@pytest.mark.parametrize("lesson", sorted(SAMPLE))
def test_the_committed_report_is_fresh_complete_and_meets_the_bar(lesson):
    source_nb = nbformat.read(str(ROOT / "autograder" / "source" / lesson / f"{lesson}.ipynb"), as_version=4)
    report = committed(lesson)
    assert report["source_digest"] == validate.source_digest(ROOT / "autograder", lesson, source_nb), \
        f"autograder/validation/{lesson}.json is stale: run `zerolab grade validate {lesson}` and commit it"
    assert [e["grade_id"] for e in report["exercises"]] == [grade_id for grade_id, _, _ in exercises(source_nb)]
    assert report.get("sample_by") in (None, "course") and report["runs"] >= 5 and not report["stale_equivalents"]
    assert validate_report.below_bar(report) == []
    assert (REPORTS / f"{lesson}.md").read_text() == validate_report.markdown(report)


def test_the_sample_covers_every_lesson():
    sys.path.insert(0, str(ROOT / "autograder"))
    import build

    assert sorted(SAMPLE) == sorted(build.lesson_names())
    for lesson, chosen in SAMPLE.items():
        source_nb = nbformat.read(str(ROOT / "autograder" / "source" / lesson / f"{lesson}.ipynb"), as_version=4)
        assert set(chosen) <= {grade_id for grade_id, _, _ in exercises(source_nb)}, lesson


def test_the_committed_index_is_made_from_the_committed_reports():
    results = [committed(lesson) for lesson in sorted(SAMPLE)]
    assert (REPORTS / "README.md").read_text() == validate_report.index(results)
