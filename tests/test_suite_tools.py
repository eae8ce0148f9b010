"""The suite's own tools: the time budget (scripts/suite_budget.py, fed by tests/conftest.py's record) and
`pytest --lesson`, which picks one lesson's tests."""
import json
import subprocess
import sys
from pathlib import Path

from conftest import _unit, lessons_of

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import suite_budget  # noqa: E402


def record(seconds_by_test, wall):
    return {"wall_seconds": wall, "workers": 2, "load_average": 0.3,
            "tests": [{"nodeid": nodeid, "seconds": seconds} for nodeid, seconds in seconds_by_test.items()]}


def test_a_module_over_its_allowance_and_one_without_are_named_and_the_total_is_judged():
    run = record({"tests/test_a.py::x": 100.0, "tests/test_a.py::y": 60.0, "tests/test_b.py::z": 30.0,
                  "tests/test_new.py::w": 5.0}, wall=600)
    lines, within = suite_budget.report(run, {"tests/test_a.py": 120, "tests/test_b.py": 40})
    text = "\n".join(lines)
    assert within and "tests/test_a.py" in text and "160" in text and "over its allowance" in text
    assert "tests/test_new.py" in text and "no allowance" in text
    assert "tests/test_b.py" in next(line for line in lines if "test_b" in line) and \
        "over" not in next(line for line in lines if "test_b" in line)

    slow = record({"tests/test_a.py::x": 2 * 25 * 60 + 1.0}, wall=1400)
    assert not suite_budget.report(slow, {})[1], "more than 2 x 25 worker-minutes is over, whatever the wall time"
    late = record({"tests/test_a.py::x": 100.0}, wall=25 * 60 + 1)
    assert not suite_budget.report(late, {})[1], "more than 25 minutes of wall time is over"


def test_the_script_reads_a_record_and_exits_1_when_over(tmp_path):
    path = tmp_path / "durations.json"
    path.write_text(json.dumps(record({"tests/test_a.py::x": 3001.0}, wall=1700)))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "suite_budget.py"), "--durations", str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "OVER the budget" in done.stdout, done.stdout + done.stderr
    missing = subprocess.run([sys.executable, str(ROOT / "scripts" / "suite_budget.py"), "--durations",
                              str(tmp_path / "none.json")], capture_output=True, text=True)
    assert missing.returncode == 2 and "run the suite first" in missing.stderr


def test_allowances_cover_the_suites_modules_and_fit_the_budget():
    allowances = json.loads((ROOT / "tests" / "suite_budget.json").read_text())
    modules = {path.relative_to(ROOT).as_posix() for path in (ROOT / "tests").glob("test_*.py")}
    assert set(allowances) <= modules, f"allowances of modules that are gone: {sorted(set(allowances) - modules)}"
    assert sum(allowances.values()) <= 2 * 25 * 60 * suite_budget.HEADROOM + len(allowances)


def test_allowances_share_the_budget_in_proportion_and_keep_headroom_only_within_it():
    over = suite_budget.allowances_from(record({"tests/test_a.py::x": 4000.0, "tests/test_b.py::y": 2000.0}, 1))
    assert over == {"tests/test_a.py": 2001, "tests/test_b.py": 1001}, "a slow suite: the budget, shared"
    within = suite_budget.allowances_from(record({"tests/test_a.py::x": 400.0, "tests/test_b.py::y": 200.0}, 1))
    assert within == {"tests/test_a.py": 501, "tests/test_b.py": 251}, "a fast one: its times and a quarter"


def test_a_lessons_tests_are_found_by_their_parameters_or_their_module():
    assert lessons_of("tests/test_zh_grading.py::test_x[09_checkpoints]") == {"09_checkpoints"}
    assert lessons_of("tests/test_no_answers_in_sight.py::test_x[06_predict_then_measure-zh]") == \
        {"06_predict_then_measure"}
    assert lessons_of("tests/test_lesson09.py::test_lesson09_leaves_no_file_and_no_process") == {"09_checkpoints"}
    assert lessons_of("tests/test_memory.py::test_stage_3") == set()


def test_a_lessons_executions_are_one_unit_of_work_and_other_modules_stay_whole():
    units = {_unit(nodeid) for nodeid in ("tests/test_notebooks.py::test_x[09_checkpoints]",
                                          "tests/test_no_answers_in_sight.py::test_x[09_checkpoints-en]",
                                          "tests/test_lesson09.py::test_lesson09_leaves_no_file_and_no_process")}
    assert units == {"lesson 09_checkpoints"}
    assert _unit("tests/test_zh_grading.py::test_x[09_checkpoints]") == "tests/test_zh_grading.py"
    assert _unit("tests/test_grading_shards.py::test_y") == _unit("tests/test_grading_corpus.py::test_z")


def test_the_readme_names_both_tools_in_both_editions():
    for name in ("README.md", "README.zh.md"):
        text = (ROOT / name).read_text()
        assert "scripts/suite_budget.py" in text and "pytest --lesson 09" in text, name
