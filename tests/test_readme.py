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
