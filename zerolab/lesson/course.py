"""The course itself: where it is published and which lessons it has.

This is the one place that holds the published repository. To publish the course, push it to GitHub and run
`python autograder/build.py --publish https://github.com/OWNER/NAME`: it writes that URL into REPO below, and
every "Open in Colab" and "Open in ModelScope" badge, the README's Binder badge and the setup cell's install line
are built from it. While REPO is None the build uses the checkout's `origin` remote when that is a GitHub
repository (autograder/build.py); without either the copy is unpublished: no badges (a badge to a repository
that does not exist is a dead end for a student), and the setup cell installs nothing on Colab or ModelScope and
says so in one line.
"""
from dataclasses import dataclass

REPO = None  # https://github.com/<owner>/<name>, written by `python autograder/build.py --publish URL`
BRANCH = "main"
COURSE_ID = "zerolab"


@dataclass(frozen=True)
class Lesson:
    name: str  # also the nbgrader assignment name and the notebook's file name
    title: str
    goal: str = ""  # what the learner leaves able to do (the README's lesson map)
    needs: tuple = ()  # extra pip packages the setup cell installs on Colab/ModelScope when they are missing
    title_zh: str = ""  # the Chinese edition's title and goal (README.zh.md's lesson map)
    goal_zh: str = ""


LESSONS = (
    Lesson("01_where_memory_goes", "Where the memory goes",
           "compute per-GPU model-state memory for any ZeRO stage and GPU count",
           title_zh="显存都去哪了", goal_zh="对任意 ZeRO 阶段和 GPU 数，算出每张 GPU 上模型状态占用的显存"),
    Lesson("02_offload", "CPU and NVMe offload",
           "say what moves to host memory, what crosses PCIe each step, and when offload pays",
           title_zh="CPU 与 NVMe 卸载", goal_zh="说清哪些数据移到主机内存、每步有多少数据经过 PCIe，以及卸载何时划算"),
    Lesson("03_overlap_comm", "Communication and overlap_comm",
           "compute per-step traffic per stage, explain buckets and what overlap hides and costs",
           title_zh="通信与 overlap_comm", goal_zh="算出各阶段每步的通信量，讲清分桶，以及重叠能掩盖什么、代价是什么"),
    Lesson("04_writing_the_config", "Writing the config",
           "write build_deepspeed_config(): ZeRO-2, overlap_comm, CPU optimizer offload with pin_memory, "
           "the batch arithmetic and fp16/bf16", needs=("deepspeed",),
           title_zh="编写配置", goal_zh="写出 build_deepspeed_config()：ZeRO-2、overlap_comm、带 pin_memory 的 CPU 优化器卸载、批大小的换算与 fp16/bf16"),
    Lesson("05_config_doctor", "Config doctor",
           "read real configs, find what is wrong or wasteful, predict the effect of a change", needs=("deepspeed",),
           title_zh="配置诊断", goal_zh="读懂真实的配置，找出错误或浪费之处，预测一处改动的效果"),
    Lesson("06_predict_then_measure", "Predict, then measure",
           "run real ZeRO stages on CPU ranks (and a GPU when there is one) and compare them to lesson 01",
           needs=("deepspeed",),
           title_zh="先预测，再实测", goal_zh="在 CPU rank 上（有 GPU 时也在 GPU 上）实际运行各个 ZeRO 阶段，并与第 01 课的计算对照"),
    Lesson("07_interview_drill", "Interview drill",
           "answer the classic ZeRO questions, with the popular wrong figures corrected", needs=("deepspeed",),
           title_zh="面试演练", goal_zh="回答 ZeRO 的经典面试题，并纠正流传甚广的错误数字"),
    Lesson("08_zero_from_scratch", "ZeRO from scratch",
           "write ZeRO-1, ZeRO-2 (gradients reduced from hooks) and ZeRO-3 (parameters gathered per layer) in "
           "torch.distributed, in bf16 with fp32 master shards, graded on real ranks on numbers, memory and traffic, "
           "side by side with DeepSpeed and FSDP2", needs=("deepspeed",),
           title_zh="从零实现 ZeRO",
           goal_zh="用 torch.distributed 写出 ZeRO-1、ZeRO-2（从钩子里规约梯度）和 ZeRO-3（按层 gather 参数），用 bf16 计算、"
                   "fp32 主权重分片，在真实 rank 上按数值、内存和通信量评分，并与 DeepSpeed 和 FSDP2 并排对比"),
    Lesson("09_checkpoints", "Checkpoints",
           "say what each rank saves at each ZeRO stage, consolidate a ZeRO checkpoint, resume on another number of "
           "GPUs (universal checkpoints), inspect any checkpoint with zerolab ckpt", needs=("deepspeed",),
           title_zh="Checkpoint",
           goal_zh="说出每个 ZeRO 阶段下每个 rank 保存了什么，合并 ZeRO checkpoint，在另一个 GPU 数量上恢复训练"
                   "（universal checkpoint），用 zerolab ckpt 检查任何 checkpoint"),
    Lesson("10_zero_in_2026", "ZeRO in 2026",
           "predict and measure a rank's bytes with bf16 master weights and moments and with Muon, and pick among "
           "DeepSpeed's newer features for the reason its own figures give", needs=("deepspeed", "transformers"),
           title_zh="2026 年的 ZeRO",
           goal_zh="预测并实测 bf16 主权重与动量、以及 Muon 下每个 rank 的字节数，并按 DeepSpeed 自己公布的数字在它的新特性中做出选择"),
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
    """Whether the course has a published repository (badges are built only then)."""
    return REPO is not None


UNPUBLISHED_NOTE = ("Colab, ModelScope and Binder badges appear here once the course is published: "
                    "`python autograder/build.py --publish https://github.com/OWNER/NAME` "
                    "(see the [instructor guide](docs/instructor.md)).")
UNPUBLISHED_NOTE_ZH = ("课程发布后，这里会出现 Colab、ModelScope 和 Binder 的徽章："
                       "`python autograder/build.py --publish https://github.com/OWNER/NAME`"
                       "（见[教师指南](docs/zh/instructor.md)）。")


LANGUAGES = ("en", "zh")


def edition_path(folder, name, language="en"):
    """A lesson's notebook in `folder` (lessons, solutions) of the repository; folder/zh/ for the Chinese edition."""
    return f"{folder}/{name}.ipynb" if language == "en" else f"{folder}/{language}/{name}.ipynb"


def lesson_path(name, language="en"):
    """Where a lesson's student notebook lives in the repository: lessons/, or lessons/zh/ for the Chinese one."""
    return edition_path("lessons", name, language)


def colab_url(name, language="en"):
    return f"https://colab.research.google.com/github/{github_path()}/blob/{BRANCH}/{lesson_path(name, language)}"


def modelscope_url(name, language="en"):
    """ModelScope's notebook opens a GitHub notebook through its share/github link."""
    return f"https://modelscope.cn/notebook/share/github/{github_path()}/blob/{BRANCH}/{lesson_path(name, language)}"


def binder_url(name=None):
    url = f"https://mybinder.org/v2/gh/{github_path()}/{BRANCH}"
    return url + (f"?labpath=lessons/{name}.ipynb" if name else "?labpath=lessons")


COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
MODELSCOPE_BADGE = "https://img.shields.io/badge/ModelScope-open%20notebook-624aff"
BINDER_BADGE = "https://mybinder.org/badge_logo.svg"


def badges(name, language="en"):
    """Markdown badges opening one lesson on Colab and on ModelScope; "" while REPO is the placeholder."""
    if not published():
        return ""
    return (f"[![Open In Colab]({COLAB_BADGE})]({colab_url(name, language)}) "
            f"[![Open in ModelScope]({MODELSCOPE_BADGE})]({modelscope_url(name, language)})")


def lesson_map():
    """README.md's lesson map: a row per lesson, its Chinese edition beside it, each with Colab and ModelScope badges."""
    rows = []
    if published():
        rows += [f"[![Binder]({BINDER_BADGE})]({binder_url()}) runs every lesson in JupyterLab on Binder.", ""]
    else:
        rows += [UNPUBLISHED_NOTE, ""]
    rows += ["| # | lesson | you leave able to | open | 中文版 |", "|---|---|---|---|---|"]
    for item in LESSONS:
        number = item.name.split("_", 1)[0]
        rows.append(f"| {number} | [{item.title}]({lesson_path(item.name)}) | {item.goal} | "
                    f"{badges(item.name) or '-'} | "
                    + " ".join(filter(None, [f"[{item.title_zh}]({lesson_path(item.name, 'zh')})",
                                             badges(item.name, "zh")])) + " |")
    return "\n".join(rows)


def lesson_map_zh():
    """README.zh.md's lesson map: the Chinese editions."""
    rows = [f"[![Binder]({BINDER_BADGE})]({binder_url()}) 可在 Binder 的 JupyterLab 中运行全部课程。" if published()
            else UNPUBLISHED_NOTE_ZH, ""]
    rows += ["| # | 课程 | 学完之后你能 | 打开 |", "|---|---|---|---|"]
    for item in LESSONS:
        number = item.name.split("_", 1)[0]
        rows.append(f"| {number} | [{item.title_zh}]({lesson_path(item.name, 'zh')}) | {item.goal_zh} | "
                    f"{badges(item.name, 'zh') or '-'} |")
    return "\n".join(rows)


def notebook_url(name, language="en"):
    return f"{REPO}/blob/{BRANCH}/{lesson_path(name, language)}"


def install_url():
    """What pip installs the zerolab package from, on hosted notebooks; None while the course is unpublished."""
    return f"git+{REPO}@{BRANCH}" if published() else None
