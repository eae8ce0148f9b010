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


def colab_url(name):
    return f"https://colab.research.google.com/github/{github_path()}/blob/{BRANCH}/lessons/{name}.ipynb"


def lesson_map():
    """The README's lesson map: a row and an "Open in Colab" badge per lesson."""
    badge = "https://colab.research.google.com/assets/colab-badge.svg"
    rows = ["| # | lesson | you leave able to | open |", "|---|---|---|---|"]
    for item in LESSONS:
        number = item.name.split("_", 1)[0]
        rows.append(f"| {number} | [{item.title}](lessons/{item.name}.ipynb) | {item.goal} | "
                    f"[![Open In Colab]({badge})]({colab_url(item.name)}) |")
    return "\n".join(rows)


def notebook_url(name):
    return f"{REPO}/blob/{BRANCH}/lessons/{name}.ipynb"


def install_url():
    """What pip installs the zerolab package from, on hosted notebooks."""
    return f"git+{REPO}@{BRANCH}"
