"""The README's quickstart is part of the product: CI runs exactly its test command."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]


def quickstart_commands():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## Quickstart.*?```bash\n(.*?)```", readme, re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_quickstart_has_two_commands_one_for_the_course_one_for_the_tests():
    course, tests = quickstart_commands()
    assert "jupyter lab lessons/" in course
    assert "pytest" in tests
    assert "scripts/setup.sh" in course and "scripts/setup.sh" in tests


def test_ci_runs_the_readme_test_command():
    _, tests = quickstart_commands()
    assert tests in (ROOT / ".ci/run").read_text().splitlines()


def test_setup_installs_the_requirements():
    setup = (ROOT / "scripts/setup.sh").read_text()
    assert "pip install -r requirements.txt" in setup and "bubblewrap" in setup


def test_requirements_pin_the_cpu_torch_and_install_zerolab():
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    assert "torch==2.13.0" in lines and "deepspeed==0.19.8" in lines and "-e ." in lines


STUB_PYTHON = """#!/bin/bash
# stands in for python3 and for .venv/bin/python: makes the venv, and plays build_ops.py until released
if [ "$1 $2" = "-m venv" ]; then
    mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; printf '#!/bin/bash\\nexit 0\\n' > "$3/bin/pip"; chmod +x "$3/bin/pip"
    exit 0
fi
if [ "$1" = scripts/build_ops.py ]; then
    echo "$$ $PPID" > "$OPS_MARKS/started"
    while [ ! -f "$OPS_MARKS/release" ]; do sleep 0.1; done
    echo compiled; touch "$OPS_MARKS/finished"
fi
exit 0
"""


def stubbed_checkout(tmp_path):
    """A checkout whose python3, pip and build_ops.py are stand-ins: setup.sh's own logic runs for real."""
    checkout, marks, bin_dir = tmp_path / "checkout", tmp_path / "marks", tmp_path / "bin"
    for folder in (checkout / "scripts", marks, bin_dir):
        folder.mkdir(parents=True)
    (checkout / "scripts" / "setup.sh").write_text((ROOT / "scripts" / "setup.sh").read_text())
    (bin_dir / "python3").write_text(STUB_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    (bin_dir / "apt-get").write_text("#!/bin/bash\nexit 0\n")  # --grading as root installs nothing from here
    (bin_dir / "apt-get").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "OPS_MARKS": str(marks), "HOME": str(tmp_path)}
    return checkout, marks, env


def test_the_course_setup_returns_while_the_ops_compile_detached_with_a_log(tmp_path):
    import os
    import subprocess
    import time

    checkout, marks, env = stubbed_checkout(tmp_path)
    done = subprocess.run(["bash", "scripts/setup.sh"], cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=120)
    try:
        assert done.returncode == 0, done.stderr
        assert ".venv/build_ops.log" in done.stdout and "setup: ready" in done.stdout, done.stdout
        while not (marks / "started").exists():  # the compile was started...
            time.sleep(0.1)
        assert not (marks / "finished").exists(), "...and the set-up returned without waiting for it"
        pid = int((marks / "started").read_text().split()[0])
        assert os.getsid(pid) != os.getsid(0), "the compile runs in a session of its own (closing the terminal spares it)"
        assert (checkout / ".venv" / "build_ops.pid").read_text().split() == [str(pid)]
        again = subprocess.run(["bash", "scripts/setup.sh"], cwd=checkout, env=env, capture_output=True, text=True,
                               timeout=120)
        assert "still compiling" in again.stdout, "a second set-up does not start a second compile"
    finally:
        (marks / "release").touch()
    while not (marks / "finished").exists():
        time.sleep(0.1)
    time.sleep(0.2)
    assert "compiled" in (checkout / ".venv" / "build_ops.log").read_text()


def test_the_grading_setup_waits_for_the_ops(tmp_path):
    import subprocess

    checkout, marks, env = stubbed_checkout(tmp_path)
    (marks / "release").touch()
    done = subprocess.run(["bash", "scripts/setup.sh", "--grading"], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (marks / "finished").exists() and "compiled" in done.stdout


def test_readme_explains_the_background_build_and_publishing_in_both_editions():
    """In the README or in the page of measured times it links (docs/benchmarks.md, docs/zh/benchmarks.md)."""
    readme, readme_zh = (ROOT / "README.md").read_text(), (ROOT / "README.zh.md").read_text()
    assert "(docs/benchmarks.md)" in readme and "(docs/zh/benchmarks.md)" in readme_zh
    readme += (ROOT / "docs" / "benchmarks.md").read_text()
    readme_zh += (ROOT / "docs" / "zh" / "benchmarks.md").read_text()
    for text in (" ".join(readme.split()), " ".join(readme_zh.split())):
        assert ".venv/build_ops.log" in text and ("compiling cpu_adam" in text or "正在编译 cpu_adam" in text)
        assert "autograder/build.py --publish https://github.com/OWNER/NAME" in text
        assert "@" + "SETUP" not in text and "@" + "OPS" not in text, "measured times filled in"


def test_the_readmes_are_short_and_every_link_of_theirs_and_of_the_guides_leads_somewhere():
    """A newcomer reads the README in two minutes; the instructor guide, the CLI reference and the measured times
    live in docs/ (both editions), linked from it. Every relative link there points at a file of the repository."""
    pages = [ROOT / "README.md", ROOT / "README.zh.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for readme, guides in (("README.md", ("docs/instructor.md", "docs/cli.md", "docs/benchmarks.md")),
                           ("README.zh.md", ("docs/zh/instructor.md", "docs/zh/cli.md", "docs/zh/benchmarks.md"))):
        text = (ROOT / readme).read_text()
        assert len(text.splitlines()) < 120, f"{readme} is {len(text.splitlines())} lines"
        assert all(f"]({guide})" in text for guide in guides), readme
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" not in target and not (page.parent / target).resolve().exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken
