"""Build every generated notebook of the course from its one source, autograder/src/<name>.py.

    python autograder/build.py [--out DIR] [--lesson NAME ...] [--no-execute] [--publish https://github.com/OWNER/NAME]

For each lesson it writes (under DIR, default: the repository):
  autograder/source/<name>/<name>.ipynb  the instructor notebook: the source plus the Colab badge and setup cell
  lessons/<name>.ipynb                   the student release, made by `nbgrader generate_assignment`
  solutions/<name>.ipynb                 the instructor notebook executed in a fresh python3 kernel, with outputs
  lessons/zh/<name>.ipynb, solutions/zh/<name>.ipynb   the same for the Chinese edition (autograder/editions.py)
and the lesson maps of README.md and README.zh.md (badges and links from zerolab/lesson/course.py).
Both editions are one nbgrader assignment: the Chinese differs only in its markdown and in its notebook metadata
(`zerolab.language`), which tells the kernel to speak Chinese (zerolab/base/i18n.py).
--no-execute skips solutions/ (tests/test_build.py checks them against the source notebook instead).
--publish URL writes URL into zerolab/lesson/course.py REPO (under DIR) and builds the badges and the setup cell's
install line from it. Without it, REPO is used, else the checkout's `origin` remote when it is on GitHub; with
none of them the copy is unpublished (no badges; the setup cell says so on Colab and ModelScope).
The format of a source file is described in autograder/src/README.md.
"""
import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # build from a checkout where zerolab is not installed
from zerolab.base.interpreter import skip_the_slow_iri_checker  # noqa: E402

skip_the_slow_iri_checker()  # before nbformat's import
import jupytext  # noqa: E402
import nbformat  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
AUTOGRADER = ROOT / "autograder"
SRC = AUTOGRADER / "src"
SETUP_SNIPPET = SRC / "_setup.py"
CELL_TIMEOUT_S = 900  # building solutions: generous, lesson 06's three real runs took over 300 s on a loaded 2-core machine
NBGRADER_KEYS = ("grade", "grade_id", "locked", "schema_version", "solution")
# What JupyterLab and Notebook 7 write into a notebook once its python3 kernel has started: the kernel's
# kernelspec and language_info (its Python version included: any difference marks the notebook modified as soon
# as it opens), and, on saving, the widget state (scripts/student_jupyter.py turns saveState on). A lesson carries
# exactly that, so opening it changes nothing and saving it unedited rewrites the same file. The version is the
# course's Python (the README's set-up; tests/test_browser.py checks the kernel it starts reports it).
PYTHON_VERSION = "3.11.7"
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                 "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                 "pygments_lexer": "ipython3", "version": PYTHON_VERSION}
# A claim mark (autograder/claims.py) is for the course's maintainers; in a student's release its id could give an
# interview question's answer away, so the release goes without them.
CLAIM_MARK = re.compile(r" ?<!-- claim: [a-z0-9-]+ -->")
NO_WIDGET_STATE = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2, "version_minor": 0}}

from zerolab.lesson import course  # noqa: E402
from editions import edition  # noqa: E402
from zerolab.base.interpreter import env_with_interpreter_bin, poll_shell_in_slices, python_module  # noqa: E402


class BuildError(Exception):
    """A lesson source that cannot be built; the message names the file and cell and what to do."""


def lesson_names():
    """Every lesson that has a source, in order. Files starting with '_' are shared snippets, not lessons."""
    return sorted(path.stem for path in SRC.glob("*.py") if not path.name.startswith("_"))


def setup_cell_source(name):
    try:
        needs = course.lesson(name).needs
    except KeyError:
        needs = ()
    header = f"INSTALL_URL = {course.install_url()!r}\nNEEDS = {list(needs)!r}\n"
    return header + SETUP_SNIPPET.read_text().rstrip("\n")


def badge_cell_source(name, language="en"):
    """Colab and ModelScope badges (zerolab/lesson/course.py REPO); while unpublished, a line for the student instead
    (how to publish is the instructor's business: the README says it)."""
    if language == "zh":
        if not course.published():
            return "请先运行下面（折叠起来的）设置单元：它检查 zerolab 是否已安装。在自己的机器上，`bash scripts/setup.sh` 会安装它（见 README.zh.md）。"
        return f"{course.badges(name, 'zh')}\n\n在 Colab 和 ModelScope 上，下面的设置单元会安装本课所需的包；请先运行它。"
    if not course.published():
        return ("Run the setup cell below (folded) first: it checks that zerolab is installed. On your own machine "
                "`bash scripts/setup.sh` installs it (see the README).")
    return (f"{course.badges(name)}\n\n"
            "On Colab and ModelScope the setup cell below installs what the lesson needs; run it first.")


def source_notebook(name, language="en"):
    """The instructor notebook for one lesson in one language, built from autograder/src/<name>.py."""
    path = SRC / f"{name}.py"
    if not path.exists():
        raise BuildError(f"no lesson source {path.relative_to(ROOT)}; lessons found: {', '.join(lesson_names())}")
    nb = edition(jupytext.read(path, fmt="py:percent"), language)
    check_source(nb, path.relative_to(ROOT))
    badge = nbformat.v4.new_markdown_cell(badge_cell_source(name, language))
    setup = nbformat.v4.new_code_cell(setup_cell_source(name))
    setup.metadata["nbgrader"] = {"grade": False, "grade_id": "setup", "locked": True, "schema_version": 3,
                                  "solution": False, "task": False}
    setup.metadata["jupyter"] = {"source_hidden": True}  # folded: students run it, they need not read it
    nb.cells[1:1] = [badge, setup]
    for index, cell in enumerate(nb.cells):
        cell.id = cell.metadata.get("nbgrader", {}).get("grade_id") or f"cell-{index:03d}"
        cell.metadata.pop("lines_to_next_cell", None)
        if cell.cell_type == "code" and cell.metadata.get("nbgrader", {}).get("solution") is not None:
            graded = cell.metadata["nbgrader"]
            if graded["solution"] or graded["grade"]:
                # An unanswered exercise raises, and so does its test: Run All (JupyterLab, Notebook 7, nbclient)
                # goes on past a cell tagged raises-exception, so the teaching cells after it still run.
                tags = cell.metadata.setdefault("tags", [])
                if "raises-exception" not in tags:
                    tags.append("raises-exception")
    nb.metadata = {"kernelspec": KERNELSPEC, "language_info": LANGUAGE_INFO, "widgets": NO_WIDGET_STATE}
    if language != "en":
        nb.metadata["zerolab"] = {"language": language}
    nb.nbformat, nb.nbformat_minor = 4, 5
    nbformat.validate(nb)
    return nb


def check_source(nb, path):
    """The rules of autograder/src/README.md that nbgrader itself would only report obscurely, or not at all."""
    cells = nb.cells
    if not cells or cells[0].cell_type != "markdown" or not cells[0].source.startswith("# "):
        raise BuildError(f"{path}: the first cell must be a markdown cell with the title ('# Lesson NN: ...')")
    seen = set()
    for index, cell in enumerate(cells):
        meta = cell.metadata.get("nbgrader")
        if meta is None:
            continue
        where = f"{path}, cell {index + 1} ({meta.get('grade_id', 'no grade_id')})"
        missing = [key for key in NBGRADER_KEYS if key not in meta]
        if meta.get("grade") and "points" not in meta:
            missing.append("points")
        if missing:
            raise BuildError(f"{where}: nbgrader metadata lacks {', '.join(missing)}")
        if meta["schema_version"] != 3:
            raise BuildError(f"{where}: schema_version must be 3")
        if meta["grade_id"] in seen or meta["grade_id"] == "setup":
            raise BuildError(f"{where}: grade_id {meta['grade_id']!r} is used twice (or is the reserved 'setup')")
        seen.add(meta["grade_id"])
        if cell.cell_type == "code" and meta["solution"] and not meta["grade"]:
            if "### BEGIN SOLUTION" not in cell.source:
                raise BuildError(f"{where}: a solution cell needs ### BEGIN SOLUTION / ### END SOLUTION markers")
            test = cells[index + 1].metadata.get("nbgrader", {}) if index + 1 < len(cells) else {}
            if test.get("grade_id") != "test_" + meta["grade_id"] or not test.get("grade") or not test.get("locked"):
                raise BuildError(f"{where}: must be followed at once by its locked test cell "
                                 f"'test_{meta['grade_id']}' with grade true")


def source_hash(nb):
    """A hash of what a notebook is made of (cell types, sources, nbgrader metadata), not of its outputs."""
    cells = [[cell.cell_type, cell.source, cell.metadata.get("nbgrader")] for cell in nb.cells]
    return hashlib.sha256(json.dumps(cells, sort_keys=True).encode()).hexdigest()


def write(nb, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))


def release_notebooks(notebooks):
    """nbgrader generate_assignment on a throw-away copy of the course, every lesson in one process
    (zerolab.grading.release); return {name: release notebook}."""
    with tempfile.TemporaryDirectory(prefix="zerolab-release-") as tmp:
        root = Path(tmp)
        shutil.copy(AUTOGRADER / "nbgrader_config.py", root / "nbgrader_config.py")
        for name, nb in notebooks.items():
            write(nb, root / "source" / name / f"{name}.ipynb")
        done = subprocess.run(python_module("zerolab.grading.release", tmp, *notebooks), cwd=tmp,
                              capture_output=True, text=True,
                              env={**env_with_interpreter_bin(), "PYTHONPATH": str(ROOT)})  # zerolab, installed or not
        if done.returncode != 0:
            raise BuildError(f"nbgrader generate_assignment failed:\n{done.stdout}{done.stderr}")
        return {name: nbformat.read(str(root / "release" / name / f"{name}.ipynb"), as_version=4)
                for name in notebooks}


def without_claim_marks(nb):
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            lines = [CLAIM_MARK.sub("", line) for line in cell.source.split("\n")]
            cell.source = "\n".join(line for line, old in zip(lines, cell.source.split("\n")) if line.strip() or not old.strip())
    return nb


def executed(nb, name):
    """The notebook run top to bottom in a fresh python3 kernel, with a hash of its source in the metadata."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    os.environ["ZEROLAB_STATIC"] = "1"  # widgets draw their static figure: an executed notebook has no frontend
    with tempfile.TemporaryDirectory(prefix=f"zerolab-run-{name}-") as tmp:
        write(nb, Path(tmp) / f"{name}.ipynb")  # the kernel reads its language from the notebook beside it
        client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3", record_timing=False,
                                resources={"metadata": {"path": tmp}})
        client.on_notebook_start = poll_shell_in_slices(client)
        try:
            client.execute()
        except CellExecutionError as error:
            raise BuildError(f"solutions/{name}.ipynb: a cell failed while executing the solution:\n{error}") from None
    for cell in nb.cells:  # cells tagged raises-exception do not stop nbclient: a solution must still not raise
        for output in cell.get("outputs", []):
            if output.output_type == "error":
                raise BuildError(f"solutions/{name}.ipynb: cell {cell.id} raised while executing the solution: "
                                 f"{output.ename}: {output.evalue}")
    nb.metadata["zerolab"] = {**nb.metadata.get("zerolab", {}), "source_sha256": source_hash(nb)}
    return nb


README_MAP = ("<!-- lesson-map: generated by `python autograder/build.py` from zerolab/lesson/course.py; do not edit by hand -->",
              "<!-- /lesson-map -->")
README_ZH_MAP = ("<!-- lesson-map-zh -->", "<!-- /lesson-map-zh -->")


def with_lesson_map(text, markers, heading, lesson_map, readme="README.md"):
    start, end = markers
    if start not in text or end not in text:
        raise BuildError(f"{readme} lacks the lesson-map markers {start} ... {end}")
    before, rest = text.split(start, 1)
    after = rest.split(end, 1)[1]
    return f"{before}{start}\n{heading}{lesson_map}\n{end}{after}"


def readme_with_lesson_map(text):
    return with_lesson_map(text, README_MAP, "## Lessons\n\n", course.lesson_map())


GITHUB_URL = re.compile(r"^(?:https?://github\.com/|git@github\.com:|ssh://git@github\.com/)"
                        r"(?P<owner>[A-Za-z0-9][A-Za-z0-9-]*)/(?P<name>[A-Za-z0-9._-]+?)(?:\.git)?/?$")


def github_repository(url):
    """https://github.com/OWNER/NAME for a GitHub URL in any form git accepts (https, ssh); None for others."""
    found = GITHUB_URL.match(url.strip())
    return f"https://github.com/{found['owner']}/{found['name']}" if found else None


def origin_repository(root=ROOT):
    """The checkout's `origin` remote when it is a GitHub repository, else None."""
    done = subprocess.run(["git", "-C", str(root), "remote", "get-url", "origin"], capture_output=True, text=True)
    return github_repository(done.stdout) if done.returncode == 0 else None


COURSE_REPO_LINE = re.compile(r"^REPO = .*$", re.M)


def publish(url, out):
    """Write url into zerolab/lesson/course.py's REPO under out (the repository itself by default)."""
    repository = github_repository(url)
    if repository is None or not url.startswith("https://github.com/"):
        raise BuildError(f"--publish takes the course's GitHub repository, https://github.com/OWNER/NAME; got {url!r}")
    text = (ROOT / "zerolab" / "lesson" / "course.py").read_text()
    if len(COURSE_REPO_LINE.findall(text)) != 1:
        raise BuildError("zerolab/lesson/course.py must have exactly one line starting 'REPO = '")
    text = COURSE_REPO_LINE.sub(lambda _: f"REPO = {repository!r}  # published with autograder/build.py --publish",
                                text)
    (out / "zerolab" / "lesson").mkdir(parents=True, exist_ok=True)
    (out / "zerolab" / "lesson" / "course.py").write_text(text)
    return repository


def build(names, out, execute=True, log=print, publish_url=None):
    out.mkdir(parents=True, exist_ok=True)
    if publish_url:
        course.REPO = publish(publish_url, out)
    elif course.REPO is None:
        course.REPO = origin_repository()
    log(f"published at {course.REPO}" if course.published() else "unpublished: no badges (see --publish)")
    if out != ROOT:  # a course folder elsewhere grades as it is: nbgrader's configuration (caps included) goes too
        (out / "autograder").mkdir(parents=True, exist_ok=True)
        shutil.copy(AUTOGRADER / "nbgrader_config.py", out / "autograder" / "nbgrader_config.py")
    (out / "README.md").write_text(readme_with_lesson_map((ROOT / "README.md").read_text()))
    (out / "README.zh.md").write_text(with_lesson_map((ROOT / "README.zh.md").read_text(), README_ZH_MAP, "",
                                                      course.lesson_map_zh(), "README.zh.md"))
    with tempfile.TemporaryDirectory(prefix="zerolab-build-runs-") as runs:
        # Both editions' teaching cells start the same real runs: the Chinese edition gets a copy of the English
        # edition's (zerolab.run.run_cache), so the two executed solutions show the same measurements.
        given = os.environ.get("ZEROLAB_RUN_CACHE")
        os.environ["ZEROLAB_RUN_CACHE"] = given or runs
        try:
            _build_editions(names, out, execute, log)
        finally:
            if given is None:
                del os.environ["ZEROLAB_RUN_CACHE"]
            else:
                os.environ["ZEROLAB_RUN_CACHE"] = given


def _build_editions(names, out, execute, log):
    for language in course.LANGUAGES:
        sources = {name: source_notebook(name, language) for name in names}
        if language == "en":  # the nbgrader assignment: one for both editions
            for name, nb in sources.items():
                write(nb, out / "autograder" / "source" / name / f"{name}.ipynb")
        started = time.perf_counter()
        for name, nb in release_notebooks(sources).items():
            write(without_claim_marks(nb), out / course.edition_path("lessons", name, language))
        log(f"released {len(sources)} lesson(s) ({language}) with nbgrader in {time.perf_counter() - started:.1f} s")
        if execute:
            for name, nb in sources.items():
                started = time.perf_counter()
                path = out / course.edition_path("solutions", name, language)
                write(executed(nb, name), path)
                log(f"executed {path.relative_to(out)} in {time.perf_counter() - started:.1f} s")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT, help="folder to write into (default: the repository)")
    parser.add_argument("--lesson", action="append", metavar="NAME", help="build only this lesson (repeatable)")
    parser.add_argument("--no-execute", action="store_true", help="skip executing the solutions")
    parser.add_argument("--publish", metavar="URL", help="the course's GitHub repository, https://github.com/OWNER/NAME: "
                        "written into zerolab/lesson/course.py REPO; badges and the setup cell's install line use it")
    args = parser.parse_args(argv)
    try:
        build(args.lesson or lesson_names(), args.out.resolve(), execute=not args.no_execute,
              publish_url=args.publish)
    except BuildError as error:
        print(f"build: error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
