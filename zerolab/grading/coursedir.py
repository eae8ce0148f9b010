"""Where things are in an nbgrader course directory, and the grading limits set in its nbgrader_config.py.

The instructor sets the limits in the course's nbgrader_config.py, next to nbgrader's own settings:

    c.ZeroLab.memory_limit = "4GiB"      # address space of the student's kernel
    c.ZeroLab.cell_timeout = 120         # seconds per cell (passed to nbgrader as Execute.timeout)
    c.ZeroLab.notebook_timeout = 900     # seconds per notebook (nbgrader has no such cap)
    c.ZeroLab.max_processes = 256        # processes and threads the kernel may have at once
    c.ZeroLab.disk_limit = "1GiB"        # the submission's folder and its /tmp together
    c.ZeroLab.isolation = "auto"         # auto | sandbox | limits | off
"""
import re
from dataclasses import dataclass
from pathlib import Path

from zerolab.errors import UserError

DEFAULTS = {"memory_limit": 4 * 2**30, "cell_timeout": 120, "notebook_timeout": 900, "max_processes": 256,
            "disk_limit": 2**30, "isolation": "auto"}
ISOLATION_MODES = ("auto", "sandbox", "limits", "off")
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(i?)B?\s*$", re.IGNORECASE)


def parse_size(text, name="memory_limit"):
    """'4GiB' -> 4294967296, '512MB' -> 512000000, 1024 -> 1024."""
    if isinstance(text, (int, float)):
        return int(text)
    match = _SIZE.match(str(text))
    if not match:
        raise UserError(f"{name} {text!r} is not a size; write e.g. '4GiB' or '512MiB'")
    number, prefix, binary = match.groups()
    power = " KMGT".index(prefix.upper() or " ")
    return int(float(number) * (1024 if binary else 1000) ** power)


@dataclass(frozen=True)
class Limits:
    memory_limit: int
    cell_timeout: int
    notebook_timeout: int
    max_processes: int
    disk_limit: int
    isolation: str

    def describe(self):
        return (f"memory {self.memory_limit / 2**30:.3g} GiB, {self.cell_timeout} s per cell, "
                f"{self.notebook_timeout} s per notebook, {self.max_processes} processes, "
                f"disk {gib(self.disk_limit)}")


def gib(size):
    return f"{size / 2**30:.3g} GiB"


@dataclass(frozen=True)
class Course:
    root: Path
    submissions: Path = None  # where submitted/<student>/<lesson> are read from (default: root/submitted)

    @property
    def config_file(self):
        return self.root / "nbgrader_config.py"

    @property
    def gradebook(self):
        return self.root / "gradebook.db"

    @property
    def work(self):
        """zerolab's own files: staged (sanitized) submissions, originals of repaired notebooks, logs."""
        return self.root / "zerolab-grading"

    def staged(self, student, lesson):
        return self.work / "staged" / student / lesson

    @property
    def submitted_root(self):
        return self.submissions or self.root / "submitted"

    def submitted(self, student, lesson):
        return self.submitted_root / student / lesson

    def autograded(self, student, lesson):
        return self.root / "autograded" / student / lesson

    def release_notebook(self, lesson):
        return self.root / "release" / lesson / f"{lesson}.ipynb"

    def source_notebook(self, lesson):
        return self.root / "source" / lesson / f"{lesson}.ipynb"

    def log(self, student, lesson):
        return self.work / "logs" / lesson / f"{student}.log"

    def load_config(self):
        """The course's nbgrader_config.py as a traitlets Config (empty when there is none)."""
        from traitlets.config import Config
        from traitlets.config.loader import PyFileConfigLoader

        if not self.config_file.exists():
            return Config()
        try:
            return PyFileConfigLoader(self.config_file.name, path=str(self.root)).load_config()
        except Exception as error:
            raise UserError(f"{self.config_file} could not be loaded: {error}") from None

    def limits(self, config=None):
        config = self.load_config() if config is None else config
        section = config.get("ZeroLab", {})
        unknown = set(section) - set(DEFAULTS)
        if unknown:
            raise UserError(f"{self.config_file}: unknown setting(s) ZeroLab.{', ZeroLab.'.join(sorted(unknown))}; "
                            f"known: {', '.join(DEFAULTS)}")
        values = dict(DEFAULTS)
        if "timeout" in config.get("Execute", {}) and config.Execute.timeout not in (None, -1):
            values["cell_timeout"] = config.Execute.timeout  # the nbgrader setting counts unless ZeroLab overrides it
        values.update(section)
        values["memory_limit"] = parse_size(values["memory_limit"])
        values["disk_limit"] = parse_size(values["disk_limit"], "disk_limit")
        for key in ("cell_timeout", "notebook_timeout", "max_processes", "disk_limit"):
            if not isinstance(values[key], int) or values[key] <= 0:
                raise UserError(f"{self.config_file}: ZeroLab.{key} should be a positive whole number, "
                                f"got {values[key]!r}")
        if values["isolation"] not in ISOLATION_MODES:
            raise UserError(f"{self.config_file}: ZeroLab.isolation should be one of {', '.join(ISOLATION_MODES)}")
        return Limits(**values)

    def students(self, lesson):
        """Everyone with a folder in submitted/ plus everyone in the gradebook, sorted. Reads only."""
        import sqlite3

        names = {path.name for path in self.submitted_root.glob("*") if path.is_dir()}
        if self.gradebook.exists():
            db = sqlite3.connect(f"{self.gradebook.resolve().as_uri()}?mode=ro", uri=True)
            try:
                names.update(row[0] for row in db.execute("select id from student"))
            finally:
                db.close()
        return sorted(names)
