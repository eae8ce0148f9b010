"""Publishing the course: `autograder/build.py --publish https://github.com/OWNER/NAME`, run on a temporary copy
(--out), writes the repository into zerolab/lesson/course.py and a working badge into the README and every lesson, and
the setup cell installs from that repository. The link formats are the ones Colab, ModelScope and Binder document,
written out here rather than taken from zerolab/lesson/course.py.
"""
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
import build  # noqa: E402

from zerolab.lesson import course  # noqa: E402

URL = "https://github.com/test-owner/test-course"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    out = tmp_path_factory.mktemp("published")
    done = subprocess.run([sys.executable, str(ROOT / "autograder" / "build.py"), "--publish", URL + ".git",
                           "--out", str(out), "--no-execute"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


def links(path):
    """Colab and ModelScope links to one notebook of the published repository."""
    return (f"https://colab.research.google.com/github/test-owner/test-course/blob/main/{path}",
            f"https://modelscope.cn/notebook/share/github/test-owner/test-course/blob/main/{path}")


def test_a_course_built_elsewhere_has_its_grading_configuration(published):
    """build.py --out writes a course folder that grades as it is: nbgrader_config.py (the caps) beside source/."""
    config = published / "autograder" / "nbgrader_config.py"
    assert config.read_text() == (ROOT / "autograder" / "nbgrader_config.py").read_text()
    assert (published / "autograder" / "source").is_dir()


def test_publish_records_the_repository_in_the_course(published):
    text = (published / "zerolab" / "lesson" / "course.py").read_text()
    assert f"REPO = '{URL}'" in text, "the .git of a clone URL is dropped"
    assert (ROOT / "zerolab" / "lesson" / "course.py").read_text() != text, "a build with --out leaves the checkout alone"


def test_every_lesson_of_both_readmes_has_its_badges(published):
    readme, readme_zh = (published / "README.md").read_text(), (published / "README.zh.md").read_text()
    for text in (readme, readme_zh):
        assert "https://mybinder.org/v2/gh/test-owner/test-course/main" in text
        assert "--publish" not in text.split("<!-- lesson-map")[1].split("<!-- /lesson-map")[0], "no unpublished note"
    for lesson in course.LESSONS:
        for link in links(f"lessons/{lesson.name}.ipynb"):
            assert f"]({link})" in readme, (lesson.name, link)
        for link in links(f"lessons/zh/{lesson.name}.ipynb"):
            assert f"]({link})" in readme and f"]({link})" in readme_zh, (lesson.name, link)


@pytest.mark.parametrize("folder", ["lessons", "lessons/zh", "autograder/source/{name}"])
def test_every_lesson_opens_itself_and_installs_from_the_repository(published, folder):
    for name in build.lesson_names():
        path = f"{folder.format(name=name)}/{name}.ipynb"
        nb = nbformat.read(str(published / path), as_version=4)
        badge, setup = nb.cells[1], nb.cells[2]
        own = f"lessons/zh/{name}.ipynb" if folder == "lessons/zh" else f"lessons/{name}.ipynb"
        for link in links(own):
            assert f"]({link})" in badge.source, (path, link)
        assert setup.metadata["nbgrader"]["grade_id"] == "setup"
        assert f"INSTALL_URL = 'git+{URL}@main'" in setup.source.splitlines(), path


@pytest.mark.parametrize("remote, repository", [
    ("https://github.com/someone/zero-lab.git", "https://github.com/someone/zero-lab"),
    ("git@github.com:someone/zero-lab.git", "https://github.com/someone/zero-lab"),
    ("ssh://git@github.com/someone/zero-lab", "https://github.com/someone/zero-lab"),
    ("https://gitlab.com/someone/zero-lab.git", None),
    ("/work/main", None),
])
def test_an_unset_repo_is_read_from_a_github_origin_remote(tmp_path, remote, repository):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", remote], check=True)
    assert build.origin_repository(tmp_path) == repository


def test_without_a_remote_the_copy_is_unpublished(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert build.origin_repository(tmp_path) is None
    assert build.origin_repository(tmp_path / "not-a-checkout") is None


def test_publish_refuses_what_is_not_a_github_repository(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "autograder" / "build.py"), "--publish",
                           "https://example.com/a/b", "--out", str(tmp_path), "--no-execute"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "https://github.com/OWNER/NAME" in done.stderr
    assert not (tmp_path / "zerolab" / "lesson" / "course.py").exists()
