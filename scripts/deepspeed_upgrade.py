"""Would the course still be right on another DeepSpeed? Runs every claim's check (autograder/claims/) and the
ledger of real runs (scripts/fit_ledger_runs.py) under that release, and reports what changed.

    python scripts/deepspeed_upgrade.py                      # the newest DeepSpeed on the package index
    python scripts/deepspeed_upgrade.py --deepspeed 0.18.9   # any release
    python scripts/deepspeed_upgrade.py --claims CLAIM-ID... --no-ledger   # a few claims, a quick look

The course pins one DeepSpeed (requirements.txt) because its numbers and sentences are checked on that release:
the suite runs every check on it. This script is how the pin moves on purpose. It makes a scratch virtual
environment that sees this one's packages (torch, transformers, nbgrader: nothing is downloaded but DeepSpeed),
installs the asked release there, runs the checks with that environment's python, and writes a report
(docs/deepspeed_upgrade.md unless --out): each claim whose check fails there, with the assertion's first line, and
each ledger row whose measured bytes moved. A claim that fails is a sentence of the course to re-read against the
new release before the pin moves; a moved ledger row is a prediction to revisit.

Takes minutes: installing DeepSpeed builds its sdist (about a minute), the scratch environment compiles its own
ops first (as scripts/setup.sh does), and the checks include real runs on 2 CPU ranks.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
sys.path.insert(0, str(ROOT / "scripts"))
import claims  # noqa: E402
import fit_ledger_runs  # noqa: E402

REPORT = ROOT / "docs" / "deepspeed_upgrade.md"


def pinned_version():
    """The DeepSpeed release requirements.txt pins."""
    found = re.search(r"^deepspeed==(\S+)", (ROOT / "requirements.txt").read_text(), re.MULTILINE)
    return found.group(1)


def newest_version(python=sys.executable):
    """The newest DeepSpeed on the package index pip reaches (None when pip cannot say)."""
    done = subprocess.run([python, "-m", "pip", "index", "versions", "deepspeed"], capture_output=True, text=True,
                          timeout=120)
    found = re.search(r"^deepspeed \(([^)]+)\)", done.stdout, re.MULTILINE)
    return found.group(1) if found else None


def say(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def scratch_environment(folder, version):
    """A venv in `folder` whose python sees this environment's packages after its own, with DeepSpeed `version`
    in its own: the python's path."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    ours = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_relative_to(sys.prefix))
    theirs = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    # addsitedir, not a bare path: this environment's own .pth files (the editable zerolab) must run too
    (theirs / "zz_inherit.pth").write_text(f"import site; site.addsitedir({str(ours)!r})\n")
    ninja = Path(sys.executable).parent / "ninja"
    if ninja.exists():
        (folder / "bin" / "ninja").symlink_to(ninja)  # zerolab builds ops with its environment's own ninja
    say(f"installing deepspeed=={version} into {folder} (it builds from its sdist: about a minute)")
    # No build isolation: DeepSpeed's setup.py imports torch, and an isolated build would download a CUDA torch.
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                    "--target", str(theirs), "--upgrade", f"deepspeed=={version}"], check=True)
    seen = subprocess.run([str(python), "-c", "import deepspeed; print(deepspeed.__version__)"],
                          capture_output=True, text=True, cwd=ROOT)
    imported = (seen.stdout.strip().splitlines() or ["(nothing)"])[-1]  # DeepSpeed logs to stdout on import
    if seen.returncode or imported != version:
        raise SystemExit(f"the scratch environment imports deepspeed {imported} instead of {version}:\n"
                         f"{seen.stderr[-2000:]}")
    say("compiling the ops the course's runs need, as scripts/setup.sh does (about a minute)")
    subprocess.run([str(python), str(ROOT / "scripts" / "build_ops.py")], cwd=ROOT, check=True,
                   env=dict(os.environ, DS_ACCELERATOR="cpu", PATH=f"{folder / 'bin'}:{os.environ['PATH']}"))
    return python


def run_checks(python, chosen, junit):
    """Runs the checks of the `chosen` claims with `python`: {check: (outcome, first line of why)}."""
    checks = sorted({claim["check"] for claim in chosen})
    say(f"running {len(checks)} checks of {len(chosen)} claims (real runs on 2 CPU ranks among them)")
    subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *checks],
                   cwd=ROOT, stdout=subprocess.DEVNULL)
    return outcomes(junit, checks)


def outcomes(junit, checks):
    """{check: (outcome, why)} from pytest's JUnit XML: a check is "passed" when every test case of it passed
    (parametrized ones included), "skipped" when it only skipped, else "failed" with its first failure's line."""
    cases = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        name = case.get("name", "").split("[")[0]
        problem = next((child for child in case if child.tag in ("failure", "error", "skipped")), None)
        outcome = "passed" if problem is None else ("skipped" if problem.tag == "skipped" else "failed")
        why = "" if problem is None else (problem.get("message") or problem.text or "").strip().splitlines()[:1]
        cases.setdefault(f"{module}::{name}", []).append((outcome, why[0] if why else ""))
    found = {}
    for check in checks:
        seen = cases.get(check, [])
        failed = [why for outcome, why in seen if outcome == "failed"]
        if not seen:
            found[check] = ("failed", "did not run (not collected under this release)")
        elif failed:
            found[check] = ("failed", failed[0])
        elif all(outcome == "skipped" for outcome, _ in seen):
            found[check] = ("skipped", seen[0][1])
        else:
            found[check] = ("passed", "")
    return found


def run_ledger(python, out):
    """The ledger's real runs under `python`, written to `out`: its rows."""
    say(f"running the ledger's {len(fit_ledger_runs.SETUPS)} real runs (a few minutes)")
    subprocess.run([str(python), str(ROOT / "scripts" / "fit_ledger_runs.py"), "--out", str(out)], cwd=ROOT,
                   check=True)
    return fit_ledger_runs.read_rows(Path(out))


def moved_rows(pinned_rows, new_rows):
    """[(stage, offload, optimizer state, pinned measured, new measured, pinned fp32 grads, new fp32 grads)] where
    they differ (None where the new ledger lacks the row)."""
    new = {row[:3]: row for row in new_rows}
    moved = []
    for row in pinned_rows:
        other = new.get(row[:3])
        if other is None or other[5:] != row[5:]:
            moved.append((*row[:3], row[5], other and other[5], row[6], other and other[6]))
    return moved


def render(version, pinned, chosen, found, moved, ledger_ran):
    lines = [f"# DeepSpeed {version} against the pinned {pinned}", "",
             f"Written by `python scripts/deepspeed_upgrade.py --deepspeed {version}`: each claim's check "
             f"(autograder/claims/) run under DeepSpeed {version} in a scratch environment with this course's torch "
             f"and transformers. On {pinned} the suite passes every one of them.", ""]
    failed = [claim for claim in chosen if found[claim["check"]][0] == "failed"]
    skipped = [claim for claim in chosen if found[claim["check"]][0] == "skipped"]
    lines += [f"- claims checked: {len(chosen)}; hold under {version}: {len(chosen) - len(failed) - len(skipped)}; "
              f"fail: {len(failed)}; skipped: {len(skipped)}", ""]
    if failed:
        lines += ["## Claims whose check fails", "", "| claim | where it is registered | check | why |",
                  "|---|---|---|---|"]
        for claim in failed:
            why = found[claim["check"]][1].replace("|", "\\|")[:300]
            lines.append(f"| {claim['id']} | {claim['file']} | `{claim['check']}` | {why} |")
        lines.append("")
    if ledger_ran:
        lines += ["## The ledger's real runs (docs/fit_ledger_runs.md)", ""]
        if not moved:
            lines += [f"Every row measures the same bytes under {version} as under {pinned}.", ""]
        else:
            lines += [f"| stage | offload_optimizer | optimizer state | measured bytes, {pinned} | {version} "
                      f"| fp32 grads, {pinned} | {version} |", "|---|---|---|---|---|---|---|"]
            lines += ["| " + " | ".join(str(value) for value in row) + " |" for row in moved]
            lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deepspeed", metavar="VERSION",
                        help="the release to try (default: the newest on the package index)")
    parser.add_argument("--claims", nargs="+", metavar="ID", help="only these claims (default: every one)")
    parser.add_argument("--no-ledger", action="store_true",
                        help="skip the ledger's real runs (scripts/fit_ledger_runs.py)")
    parser.add_argument("--out", type=Path, default=REPORT, help=f"the report (default: {REPORT.relative_to(ROOT)})")
    parser.add_argument("--keep", action="store_true", help="keep the scratch environment and say where it is")
    args = parser.parse_args(argv)

    pinned = pinned_version()
    version = args.deepspeed or newest_version()
    if version is None:
        parser.error("pip could not list DeepSpeed's releases (no package index?): pass --deepspeed VERSION")
    if version == pinned:
        print(f"DeepSpeed {pinned} is the pinned release{'' if args.deepspeed else ' and the newest on the index'}: "
              "the suite already checks every claim on it. Pass --deepspeed VERSION to try another.")
        return 0
    everything = claims.register()
    chosen = everything if not args.claims else [claim for claim in everything if claim["id"] in args.claims]
    unknown = sorted(set(args.claims or ()) - {claim["id"] for claim in chosen})
    if unknown:
        parser.error(f"no such claim: {', '.join(unknown)} (docs/claims.md lists them)")

    folder = Path(tempfile.mkdtemp(prefix=f"deepspeed-{version}-"))
    try:
        python = scratch_environment(folder, version)
        found = run_checks(python, chosen, folder / "checks.xml")
        moved = []
        if not args.no_ledger:
            pinned_rows = fit_ledger_runs.read_rows()
            moved = moved_rows(pinned_rows, run_ledger(python, folder / "ledger.md"))
    finally:
        if args.keep:
            say(f"the scratch environment stays in {folder}")
        else:
            shutil.rmtree(folder, ignore_errors=True)
    args.out.write_text(render(version, pinned, chosen, found, moved, not args.no_ledger) + "\n", encoding="utf-8")
    failed = sum(outcome == "failed" for outcome, _ in found.values())
    say(f"wrote {os.path.relpath(args.out)}: {failed} of {len(found)} checks fail under {version}, "
        f"{len(moved)} ledger rows moved")
    print(json.dumps({"deepspeed": version, "pinned": pinned, "checks_failed": failed, "checks": len(found),
                      "ledger_rows_moved": len(moved)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
