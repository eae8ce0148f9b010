"""docs/fit_ledger.md (and fit_ledger_runs.md) are current: written by this simulation, their predicted columns what
the engine computes now."""
import re
from pathlib import Path

import pytest

from repo_scripts import load_script

ROOT = Path(__file__).resolve().parent.parent
REGENERATE = "regenerate it: `nice python scripts/fit_ledger.py` (or --formula-only when only a formula changed)"


@pytest.fixture(scope="module")
def ledger_script():
    return load_script("fit_ledger")


def test_the_ledger_was_simulated_by_this_simulation(ledger_script):
    text = ledger_script.LEDGER.read_text(encoding="utf-8")
    recorded = re.search(r"simulation fingerprint: (\w+)", text)
    assert recorded and recorded.group(1) == ledger_script.fingerprint(), f"docs/fit_ledger.md is stale: {REGENERATE}"


def test_every_grid_row_is_there_and_its_formulas_are_current(ledger_script):
    rows = ledger_script.read_rows()
    keys = {(name, attention, recompute, (seq, micro)) for name, attention, recompute, seq, micro, _, _ in rows}
    assert keys == set(ledger_script.grid()), f"the ledger's rows are not the script's grid: {REGENERATE}"
    assert ledger_script.render(rows, "python scripts/fit_ledger.py") == \
        ledger_script.LEDGER.read_text(encoding="utf-8"), f"a formula changed: {REGENERATE}"


def test_the_hf_formula_stays_within_3_percent_at_full_size(ledger_script):
    rows = ledger_script.read_rows()
    for name, attention, recompute, seq, micro, simulated, _ in rows:
        cells = ledger_script.formula_columns(name, attention, recompute, seq, micro, simulated)
        assert abs(float(cells[1][:-1])) <= 3.0, (name, attention, recompute, seq, micro, cells)


def test_the_lessons_record_holds_the_ledgers_rows(ledger_script):
    """zerolab/sizing/data/fit_ledger.json (what zerolab.sizing.fit_ledger gives the lessons) is written with the markdown."""
    from zerolab.sizing import fit_ledger

    assert fit_ledger.RECORD.read_text(encoding="utf-8") == ledger_script.record(ledger_script.read_rows()), \
        f"zerolab/sizing/data/fit_ledger.json is stale: {REGENERATE}"
    summary = fit_ledger.summary()
    assert summary["hf"]["rows"] == len(ledger_script.grid())
    assert abs(summary["hf"]["worst"]) <= 0.03 < abs(summary["megatron"]["worst"])


@pytest.fixture(scope="module")
def runs_script():
    return load_script("fit_ledger_runs")


def test_the_real_run_ledger_predictions_are_current(runs_script):
    """docs/fit_ledger_runs.md: every setup measured, and its predicted column what zerolab.engine.memory says now."""
    rows = runs_script.read_rows()
    assert [tuple(row[:3]) for row in rows] == list(runs_script.SETUPS)
    assert runs_script.render(rows) == runs_script.LEDGER.read_text(encoding="utf-8"), \
        "docs/fit_ledger_runs.md is stale: regenerate it with `python scripts/fit_ledger_runs.py`"
    assert all(measured > 0 for *_, measured, _ in rows)
