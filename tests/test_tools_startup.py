"""zerolab's own processes (its commands, grading workers, the build) start without jsonschema's slow "iri" checker
(zerolab.base.interpreter.skip_the_slow_iri_checker), lose no validation that nbgrader relies on, and leave a learner's
kernel as it was."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

IRI_FORMAT = re.compile(r"""["']?format["']?\s*:\s*["']?iri""")


def python(code):
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize("package", ["nbformat", "nbgrader", "jupyter_events", "jupyter_server", "nbclient"])
def test_no_schema_of_the_grading_stack_uses_an_iri_format(package):
    module = pytest.importorskip(package)
    schemas = [path for path in Path(module.__file__).parent.rglob("*")
               if path.suffix in (".json", ".yaml", ".yml") and path.is_file()]
    users = [str(path) for path in schemas if IRI_FORMAT.search(path.read_text(errors="replace"))]
    assert users == [], f"these schemas check iri formats, which skip_the_slow_iri_checker turns off: {users}"


def test_a_grading_worker_skips_the_checker_and_still_validates_notebooks():
    loaded, valid, invalid = python(
        "import sys\n"
        "import zerolab.grading.worker\n"
        "import nbformat\n"
        "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1')])\n"
        "nbformat.validate(nb)\n"
        "nb.cells[0]['outputs'] = 'not a list'\n"
        "try:\n"
        "    nbformat.validate(nb); invalid = 'accepted'\n"
        "except nbformat.ValidationError:\n"
        "    invalid = 'rejected'\n"
        "print(sys.modules.get('rfc3987_syntax', 'absent') is None, 'valid', invalid)")
    assert loaded == "True", "the worker's import of nbgrader built rfc3987-syntax's parsers"
    assert (valid, invalid) == ("valid", "rejected")


def test_the_command_line_skips_it_before_any_command_runs():
    *_help, blocked = python("import sys\nfrom zerolab.cli import main as cli\n"
                        "try:\n    cli.main(['grade', '--help'])\nexcept SystemExit:\n    pass\n"
                        "print(sys.modules.get('rfc3987_syntax', 'absent') is None)")
    assert blocked == "True"


def test_a_kernel_importing_zerolab_keeps_its_jsonschema_whole():
    (state,) = python("import sys\nimport zerolab, zerolab.lesson.checks\n"
                      "print('blocked' if sys.modules.get('rfc3987_syntax', 'absent') is None else 'untouched')")
    assert state == "untouched"
