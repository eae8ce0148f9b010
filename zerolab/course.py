"""The course itself: where it is published and which lessons it has.

This is the one place that sets the published repository. To publish the course: set REPO to the GitHub
repository the course is pushed to (and BRANCH), then `python autograder/build.py`. Every "Open in Colab" and
"Open in ModelScope" badge, the README's Binder badge and the setup cell's install line are built from it.
While REPO is still PLACEHOLDER_REPO the build publishes no badges (a badge to a repository that does not
exist is a dead end for a student); it writes a note saying how to publish instead.
"""
from dataclasses import dataclass

PLACEHOLDER_REPO = "https://github.com/zerolab-course/zero-lab"
REPO = PLACEHOLDER_REPO  # set to https://github.com/<owner>/<name> to publish
BRANCH = "main"
COURSE_ID = "zerolab"


@dataclass(frozen=True)
class Lesson:
    name: str  # also the nbgrader assignment name and the notebook's file name
    title: str
    goal: str = ""  # what the learner leaves able to do (the README's lesson map)
    needs: tuple = ()  # extra pip packages the setup cell installs on Colab/ModelScope when they are missing


LESSONS = (
    Lesson("01_where_memory_goes", "Where the memory goes",
           "compute per-GPU model-state memory for any ZeRO stage and GPU count"),
    Lesson("02_offload", "CPU and NVMe offload",
           "say what moves to host memory, what crosses PCIe each step, and when offload pays"),
    Lesson("03_overlap_comm", "Communication and overlap_comm",
           "compute per-step traffic per stage, explain buckets and what overlap hides and costs"),
    Lesson("04_writing_the_config", "Writing the config",
           "write build_deepspeed_config(): ZeRO-2, overlap_comm, CPU optimizer offload with pin_memory, "
           "the batch arithmetic and fp16/bf16", needs=("deepspeed",)),
    Lesson("05_config_doctor", "Config doctor",
           "read real configs, find what is wrong or wasteful, predict the effect of a change", needs=("deepspeed",)),
    Lesson("06_predict_then_measure", "Predict, then measure",
           "run real ZeRO stages on CPU ranks (and a GPU when there is one) and compare them to lesson 01",
           needs=("deepspeed",)),
    Lesson("07_interview_drill", "Interview drill",
           "answer the classic ZeRO questions, with the popular wrong figures corrected"),
    Lesson("08_zero_from_scratch", "ZeRO from scratch",
           "write ZeRO-1 (a sharded AdamW) and ZeRO-2 (sharded gradients) in torch.distributed, checked on real "
           "ranks against AdamW and DeepSpeed", needs=("deepspeed",)),
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


def published():
    """Whether REPO names the real repository (badges are built only then)."""
    return REPO != PLACEHOLDER_REPO


UNPUBLISHED_NOTE = ("Colab, ModelScope and Binder badges appear here once the course is published: set `REPO` in "
                    "`zerolab/course.py` to its GitHub repository and run `python autograder/build.py`.")


def colab_url(name):
    return f"https://colab.research.google.com/github/{github_path()}/blob/{BRANCH}/lessons/{name}.ipynb"


def modelscope_url(name):
    """ModelScope's notebook opens a GitHub notebook through its share/github link."""
    return f"https://modelscope.cn/notebook/share/github/{github_path()}/blob/{BRANCH}/lessons/{name}.ipynb"


def binder_url(name=None):
    url = f"https://mybinder.org/v2/gh/{github_path()}/{BRANCH}"
    return url + (f"?labpath=lessons/{name}.ipynb" if name else "?labpath=lessons")


COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
MODELSCOPE_BADGE = "https://img.shields.io/badge/ModelScope-open%20notebook-624aff"
BINDER_BADGE = "https://mybinder.org/badge_logo.svg"


def badges(name):
    """Markdown badges opening one lesson on Colab and on ModelScope; "" while REPO is the placeholder."""
    if not published():
        return ""
    return (f"[![Open In Colab]({COLAB_BADGE})]({colab_url(name)}) "
            f"[![Open in ModelScope]({MODELSCOPE_BADGE})]({modelscope_url(name)})")


def lesson_map():
    """The README's lesson map: a row per lesson with its Colab and ModelScope badges, and the Binder badge."""
    rows = []
    if published():
        rows += [f"[![Binder]({BINDER_BADGE})]({binder_url()}) runs every lesson in JupyterLab on Binder.", ""]
    else:
        rows += [UNPUBLISHED_NOTE, ""]
    rows += ["| # | lesson | you leave able to | open |", "|---|---|---|---|"]
    for item in LESSONS:
        number = item.name.split("_", 1)[0]
        rows.append(f"| {number} | [{item.title}](lessons/{item.name}.ipynb) | {item.goal} | "
                    f"{badges(item.name) or '-'} |")
    return "\n".join(rows)


def notebook_url(name):
    return f"{REPO}/blob/{BRANCH}/lessons/{name}.ipynb"


def install_url():
    """What pip installs the zerolab package from, on hosted notebooks."""
    return f"git+{REPO}@{BRANCH}"
