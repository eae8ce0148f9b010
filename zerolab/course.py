"""The course itself: where it is published and which lessons it has.

This is the one place that sets the repository URL. Every "Open in Colab" badge and the setup cell's
install line are built from it (autograder/build.py); change REPO or BRANCH here and rebuild.
"""
from dataclasses import dataclass

REPO = "https://github.com/zerolab-course/zero-lab"
BRANCH = "main"
COURSE_ID = "zerolab"


@dataclass(frozen=True)
class Lesson:
    name: str  # also the nbgrader assignment name and the notebook's file name
    title: str
    needs: tuple = ()  # extra pip packages the setup cell installs on Colab/ModelScope when they are missing


LESSONS = (
    Lesson("01_where_memory_goes", "Where the memory goes"),
    Lesson("02_offload", "CPU and NVMe offload"),
    Lesson("03_overlap_comm", "Communication and overlap_comm"),
    Lesson("04_writing_the_config", "Writing the config", needs=("deepspeed",)),
    Lesson("05_config_doctor", "Config doctor", needs=("deepspeed",)),
    Lesson("06_predict_then_measure", "Predict, then measure", needs=("deepspeed",)),
    Lesson("07_interview_drill", "Interview drill"),
)


def lesson(name):
    for item in LESSONS:
        if item.name == name:
            return item
    raise KeyError(f"unknown lesson {name!r}; known: {', '.join(item.name for item in LESSONS)}")


def github_path():
    """'owner/name' from REPO."""
    prefix = "https://github.com/"
    if not REPO.startswith(prefix):
        raise ValueError(f"REPO must be a GitHub URL starting with {prefix}, got {REPO!r}")
    return REPO[len(prefix):].strip("/")


def colab_url(name):
    return f"https://colab.research.google.com/github/{github_path()}/blob/{BRANCH}/lessons/{name}.ipynb"


def notebook_url(name):
    return f"{REPO}/blob/{BRANCH}/lessons/{name}.ipynb"


def install_url():
    """What pip installs the zerolab package from, on hosted notebooks."""
    return f"git+{REPO}@{BRANCH}"
