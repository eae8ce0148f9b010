"""scripts/deepspeed_upgrade.py, the way the DeepSpeed pin moves on purpose: it reads pytest's real JUnit report of
the claims' checks right (a parametrized check fails if any case fails; a check never collected counts as failed),
finds the ledger rows that moved, and its committed report is about the pinned release. The full run (a scratch
venv, every check, the ledger's runs) takes minutes and is run by hand; its report is committed."""
import re
import subprocess
import sys
from pathlib import Path

import deepspeed

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import deepspeed_upgrade  # noqa: E402
import fit_ledger_runs  # noqa: E402


def test_the_pin_is_the_deepspeed_this_suite_runs_on():
    assert deepspeed_upgrade.pinned_version() == deepspeed.__version__


def test_outcomes_read_pytests_own_junit_report(tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_sample.py").write_text(
        "import pytest\n"
        "def test_holds():\n    assert 1 + 1 == 2\n"
        "def test_changed():\n    assert 0.4 == 0.2, 'universal_checkpoint_version moved'\n"
        "@pytest.mark.parametrize('stage', [1, 2, 3])\n"
        "def test_per_stage(stage):\n    assert stage != 3, 'stage 3 now keeps more'\n"
        "def test_needs_cuda():\n    pytest.skip('needs CUDA')\n")
    junit = tmp_path / "report.xml"
    checks = ["tests/test_sample.py::" + name for name in
              ("test_holds", "test_changed", "test_per_stage", "test_needs_cuda", "test_removed_upstream")]
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                    f"--junitxml={junit}", "--rootdir", str(tmp_path), "tests/test_sample.py"],
                   cwd=tmp_path, capture_output=True, timeout=120)
    found = deepspeed_upgrade.outcomes(junit, checks)
    assert found["tests/test_sample.py::test_holds"] == ("passed", "")
    assert found["tests/test_sample.py::test_changed"][0] == "failed"
    assert "universal_checkpoint_version moved" in found["tests/test_sample.py::test_changed"][1]
    assert found["tests/test_sample.py::test_per_stage"][0] == "failed"
    assert "stage 3 now keeps more" in found["tests/test_sample.py::test_per_stage"][1]
    assert found["tests/test_sample.py::test_needs_cuda"][0] == "skipped"
    assert found["tests/test_sample.py::test_removed_upstream"][0] == "failed"


def test_moved_ledger_rows_are_those_whose_measured_bytes_differ():
    rows = fit_ledger_runs.read_rows()
    assert len(rows) == len(fit_ledger_runs.SETUPS)
    assert deepspeed_upgrade.moved_rows(rows, rows) == []
    stage, offload, state, params, largest, measured, fp32 = rows[1]
    other = [*rows[:1], (stage, offload, state, params, largest, measured + 2048, fp32), *rows[2:-1]]
    assert deepspeed_upgrade.moved_rows(rows, other) == [
        (stage, offload, state, measured, measured + 2048, fp32, fp32),
        (*rows[-1][:3], rows[-1][5], None, rows[-1][6], None)]


def test_asking_for_the_pinned_release_says_so_and_installs_nothing():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "deepspeed_upgrade.py"), "--deepspeed",
                           deepspeed.__version__], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"DeepSpeed {deepspeed.__version__} is the pinned release" in done.stdout


def test_the_committed_report_compares_a_release_with_the_pinned_one():
    report = (ROOT / "docs" / "deepspeed_upgrade.md").read_text()
    title = re.match(r"# DeepSpeed (\S+) against the pinned (\S+)\n", report)
    assert title, "run python scripts/deepspeed_upgrade.py"
    assert title.group(2) == deepspeed_upgrade.pinned_version(), \
        "the pin moved since the report: run python scripts/deepspeed_upgrade.py --deepspeed <another release>"
