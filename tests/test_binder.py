"""binder/ as Binder reads it: repo2docker's own build-pack detection and script collection, without docker."""
import re
from pathlib import Path

import pytest

repo2docker = pytest.importorskip("repo2docker", reason="pip install -r scripts/requirements-grading.txt")
from repo2docker.app import Repo2Docker  # noqa: E402
from repo2docker.buildpacks import PythonBuildPack  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def buildpack(monkeypatch):
    """The build pack repo2docker picks for this repository, the way Repo2Docker.build() picks it."""
    monkeypatch.chdir(ROOT)
    app = Repo2Docker()
    for cls in app.buildpacks:
        pack = cls(base_image=app.base_image)
        if pack.detect():
            return pack
    pytest.fail("repo2docker finds no environment specification in this repository")


def test_binder_builds_python_from_binder_folder(buildpack):
    assert isinstance(buildpack, PythonBuildPack) and type(buildpack).__name__ == "PythonBuildPack"
    assert buildpack.binder_dir == "binder", "repo2docker must read binder/, not the top-level requirements.txt"
    assert buildpack.python_version == "3.11"


def test_binder_installs_the_course_requirements_and_runs_its_scripts(buildpack):
    scripts = [command for _user, command in buildpack.get_preassemble_scripts() + buildpack.get_assemble_scripts()]
    assert any("-r" in command and "binder/requirements.txt" in command for command in scripts), scripts
    assert buildpack.get_post_build_scripts() == ["binder/postBuild"]
    assert buildpack.get_start_script().endswith("/binder/start")
    post = (ROOT / "binder/postBuild").read_text()
    assert "scripts/student_jupyter.py" in post and "scripts/build_ops.py" in post
    assert "DS_ACCELERATOR=cpu" in (ROOT / "binder/start").read_text()


def test_binder_pins_what_a_local_install_pins():
    def pins(path):
        lines = (ROOT / path).read_text().splitlines()
        return {m.group(1): line for line in lines if (m := re.match(r"([A-Za-z0-9_.-]+)\s*[=<>]", line))}

    local, binder = pins("requirements.txt"), pins("binder/requirements.txt")
    for package in ("torch", "deepspeed", "nbgrader", "jupyterlab", "ipywidgets"):
        assert binder.get(package) == local[package], f"binder/requirements.txt pins {package} differently"
