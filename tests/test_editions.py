"""The English and Chinese editions come from one source and cannot drift apart (issue 15).

- every English markdown cell has a Chinese cell written after the English's last change (autograder/editions.py);
- the two editions share every code cell, its nbgrader metadata and cell ids, and differ in no code at all,
  in the sources and in the built releases;
- every message a learner reads in a lesson's code cells (asserts, tr(), hints and slips given to zerolab.lesson.checks)
  has a Chinese translation (zerolab/base/locale/zh/);
- a deliberately stale Chinese cell is reported, and --stamp is what records a new English hash.
"""
import json
import re
import sys
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
import build  # noqa: E402
import editions  # noqa: E402

from lesson_messages import feedback_arguments, messages  # noqa: E402
from zerolab.base.i18n import translate  # noqa: E402

LESSONS = build.lesson_names()
CJK = re.compile(r"[\u4e00-\u9fff]")


def source(name):
    return jupytext.read(ROOT / "autograder" / "src" / f"{name}.py", fmt="py:percent")


def code_and_grading(cells):
    """What both editions must share: each cell's type, id, code source and nbgrader metadata (not markdown)."""
    return [(cell["cell_type"], cell.get("id"), cell["source"] if cell["cell_type"] == "code" else None,
             cell.get("metadata", {}).get("nbgrader")) for cell in cells]


@pytest.mark.parametrize("name", LESSONS)
def test_every_english_cell_has_a_current_chinese_cell(name):
    problems = editions.problems(source(name), f"autograder/src/{name}.py")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", LESSONS)
def test_chinese_cells_are_chinese_and_keep_the_numbers(name):
    for english, chinese in editions.pairs(source(name))[0]:
        if chinese is None:
            continue
        assert CJK.search(chinese.source), f"{name}: the Chinese cell after {english.source[:50]!r} has no Chinese"
        # Numbers written out in words ("13 billion" is "130 亿" in Chinese) are left out of the comparison.
        numbers = lambda text: sorted(re.findall(r"(?<![\w.])(?:\d[\d,.]*\d|\d)(?![\w]|[.,]\d)(?!\s+(?:billion|million|thousand))",
                                                 text))  # noqa: E731
        lost = set(numbers(english.source)) - set(numbers(chinese.source))
        assert not lost, f"{name}: the Chinese cell after {english.source[:50]!r} lacks the numbers {sorted(lost)}"


@pytest.mark.parametrize("name", LESSONS)
def test_editions_share_code_and_grading_metadata(name):
    english, chinese = build.source_notebook(name, "en"), build.source_notebook(name, "zh")
    assert code_and_grading(english.cells) == code_and_grading(chinese.cells)
    assert chinese.metadata["zerolab"]["language"] == "zh" and "zerolab" not in english.metadata
    released = [json.loads((ROOT / path).read_text()) for path in (f"lessons/{name}.ipynb", f"lessons/zh/{name}.ipynb")]
    assert code_and_grading(released[0]["cells"]) == code_and_grading(released[1]["cells"]), \
        f"lessons/{name}.ipynb and lessons/zh/{name}.ipynb differ in code or grading: rebuild"


@pytest.mark.parametrize("name", LESSONS)
def test_every_message_in_the_code_has_a_chinese_translation(name):
    missing = [f"line {line}: {key!r}" for cell in source(name).cells if cell.cell_type == "code"
               for line, key in messages(cell.source) + feedback_arguments(cell.source)
               if translate(key, "zh") == key]
    assert not missing, f"{name}: add these to zerolab/base/locale/zh/{name}.json:\n" + "\n".join(missing)


def test_a_stale_chinese_cell_is_caught_and_stamping_records_the_new_english(tmp_path):
    lesson = tmp_path / "99_demo.py"
    lesson.write_text('# %% [markdown]\n# # Lesson 99: demo\n\n'
                      '# %% [markdown] lang="zh" en=""\n# # 第 99 课：演示\n\n'
                      '# %% [markdown]\n# Each rank keeps 1/N of the optimizer states.\n\n'
                      '# %% [markdown] lang="zh" en=""\n# 每个 rank 只保留 1/N 的优化器状态。\n\n'
                      '# %%\nx = 1\n')
    assert len(editions.problems(jupytext.read(lesson, fmt="py:percent"), "demo")) == 2, "unstamped cells are stale"
    editions.stamp(lesson)
    assert editions.problems(jupytext.read(lesson, fmt="py:percent"), "demo") == []
    lesson.write_text(lesson.read_text().replace("keeps 1/N of", "keeps only 1/N of"))
    (stale,) = editions.problems(jupytext.read(lesson, fmt="py:percent"), "demo")
    assert "changed after its Chinese cell was written" in stale and "Each rank keeps only" in stale
    zh = editions.edition(jupytext.read(lesson, fmt="py:percent"), "zh")
    assert [cell.source for cell in zh.cells] == ["# 第 99 课：演示", "每个 rank 只保留 1/N 的优化器状态。", "x = 1"]


def test_a_missing_and_an_orphan_chinese_cell_are_named():
    nb = jupytext.reads('# %% [markdown]\n# # Lesson 99\n\n# %%\nx = 1\n\n'
                        '# %% [markdown] lang="zh" en=""\n# 孤儿\n', fmt="py:percent")
    problems = editions.problems(nb, "demo")
    assert any("no Chinese cell after" in line for line in problems)
    assert any("does not follow an English markdown cell" in line for line in problems)
