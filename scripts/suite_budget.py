"""Is the test suite still inside its budget? Per module, against the allowances in tests/suite_budget.json.

    .venv/bin/python scripts/suite_budget.py                      # the last run (tests/artifacts/durations.json)
    .venv/bin/python scripts/suite_budget.py --durations FILE     # another run's record
    .venv/bin/python scripts/suite_budget.py --update             # write the allowances from the last run

Every run of the suite records each test's seconds (setup, call and teardown together), the CPU seconds it and its
children spent (a module far below its seconds is waiting: on a cap, a sleep, a slow peer) and the run's wall time
in tests/artifacts/durations.json (tests/conftest.py). The budget is 25 minutes of wall time on an idle 2-core
machine, so at most 25 worker-minutes of tests per pytest-xdist worker the run had (2 in pyproject.toml). The CPU
seconds are those of processes the test waited for:
the ranks of a warm launcher, jobs under Slurm and kernels in the grading sandbox are not among them. Each test module has an allowance: its share of those
worker-minutes, in proportion to its seconds in a measured run (plus a quarter, when that run was within the
budget). This script prints every module that took longer than its allowance or has none, the total and the wall time against the budget, and exits 1 when the run as a whole
is over. A change that adds minutes shows here before it lands: run the module you changed, then this script
with --module MODULE, or the whole suite and then this script.
"""
import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATIONS = ROOT / "tests" / "artifacts" / "durations.json"
ALLOWANCES = ROOT / "tests" / "suite_budget.json"
BUDGET_S = 25 * 60
WORKERS = 2
HEADROOM = 1.25


def per_module(record, field="seconds"):
    seconds = defaultdict(float)
    for test in record["tests"]:
        seconds[test["nodeid"].split("::", 1)[0]] += test.get(field, 0.0)
    return dict(seconds)


def minutes(seconds):
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


def report(record, allowances, only=None):
    """(lines to print, whether the run is within the budget)."""
    modules = per_module(record)
    cpu = per_module(record, "cpu_seconds") if any("cpu_seconds" in test for test in record["tests"]) else None
    lines = [f"{'module':<46} {'seconds':>8} {'allowed':>8}" + (f" {'CPU s':>8}" if cpu else "")]
    for module, seconds in sorted(modules.items(), key=lambda item: -item[1]):
        if only and module not in only:
            continue
        allowed = allowances.get(module)
        flag = "" if allowed is not None and seconds <= allowed else \
            ("  <- no allowance: add it with --update" if allowed is None else "  <- over its allowance")
        spent = f" {cpu.get(module, 0.0):8.0f}" if cpu else ""
        lines.append(f"{module:<46} {seconds:8.0f} {'-' if allowed is None else f'{allowed:8.0f}':>8}{spent}{flag}")
    total = sum(modules.values())
    wall = record.get("wall_seconds")
    workers = record.get("workers", WORKERS)
    within = total <= workers * BUDGET_S and (wall is None or wall <= BUDGET_S)
    lines.append(f"total: {minutes(total)} of tests on {workers} workers (at most "
                 f"{minutes(workers * BUDGET_S)}); wall time {minutes(wall) if wall else 'unknown'} (budget "
                 f"{minutes(BUDGET_S)}, idle 2-core machine; load average at the start "
                 f"{record.get('load_average', 'unknown')}): {'within' if within else 'OVER'} the budget")
    return lines, within


def allowances_from(record):
    """Each module's share of the budget: its share of this run's test time, times the budget's worker-seconds,
    plus a quarter when the run was inside the budget (so allowances never add up to more than the budget allows
    without headroom, and a suite over budget has every module over its share until it is made faster)."""
    modules = per_module(record)
    total = sum(modules.values())
    scale = min(HEADROOM, record.get("workers", WORKERS) * BUDGET_S / total) if total else 1.0
    return {module: round(seconds * scale + 1) for module, seconds in sorted(modules.items())}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--durations", type=Path, default=DURATIONS, help="a run's record (default: the last run)")
    parser.add_argument("--module", action="append", help="only this module (tests/test_x.py); repeatable")
    parser.add_argument("--update", action="store_true", help="set every allowance from this run (an idle run)")
    args = parser.parse_args(argv)
    if not args.durations.exists():
        print(f"suite_budget: no record at {args.durations}: run the suite first (.venv/bin/python -m pytest)",
              file=sys.stderr)
        return 2
    record = json.loads(args.durations.read_text())
    if args.update:
        ALLOWANCES.write_text(json.dumps(allowances_from(record), indent=1) + "\n")
        print(f"suite_budget: wrote {len(per_module(record))} allowances to {ALLOWANCES.relative_to(ROOT)}")
        return 0
    allowances = json.loads(ALLOWANCES.read_text()) if ALLOWANCES.exists() else {}
    lines, within = report(record, allowances, only=set(args.module or ()))
    print("\n".join(lines))
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
