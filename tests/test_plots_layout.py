"""Lesson 01's whole-budget figure (zerolab.lesson.plots.budget_by_stage) laid out so that no text overlaps, in both editions.

The figure is drawn as a notebook shows it (zerolab.lesson.plots.show: PNG at 90 dpi), then the extent of every text the
renderer placed (title, legend, panel titles, tick labels, axis labels, the total above each bar) is compared:
no two may overlap, each stays inside the figure, the title and legend stay off the panels, and the bar totals stay
inside their panel. Drawn as the lesson draws it (three panels: the static view) and as the widget draws it (one
panel), with the longest title a preset gives.
"""
import itertools

import pytest

import zerolab.base.i18n
from zerolab.lesson import plots

DPI = 90  # zerolab.lesson.plots.show
FIGURES = {
    "lesson 01 (static view)": dict(model="llama2-7b", gpus=8, seq_len=4096, micro_batch=1,
                                    recomputes=("none", "selective", "full")),
    "widget, one panel": dict(model="llama2-7b", gpus=8, seq_len=4096, micro_batch=1, recomputes=("full",)),
    "widget, longest title": dict(model="gpt3-175b", gpus=1024, seq_len=32768, micro_batch=64, recomputes=("none",),
                                  precision="fp32"),
}


@pytest.fixture(params=["en", "zh"])
def edition(request, monkeypatch):
    import matplotlib

    monkeypatch.setenv("ZEROLAB_LANG", request.param)
    zerolab.base.i18n.language.cache_clear()
    with matplotlib.rc_context():
        yield request.param
    zerolab.base.i18n.language.cache_clear()


def placed_texts(fig):
    """{name: window extent} of every visible, non-empty text of the drawn figure, and the panels' extents."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig.set_dpi(DPI)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    texts = {"title": fig._suptitle}
    for index, ax in enumerate(fig.axes):
        texts[f"panel {index} title"] = ax.title
        texts[f"panel {index} y label"] = ax.yaxis.label
        texts[f"panel {index} x label"] = ax.xaxis.label
        for kind, labels in (("x", ax.get_xticklabels()), ("y", ax.get_yticklabels())):
            texts.update({f"panel {index} {kind} tick {label.get_text()!r}": label for label in labels})
        texts.update({f"panel {index} total {text.get_text()!r}": text for text in ax.texts})
    boxes = {name: text.get_window_extent(renderer) for name, text in texts.items()
             if text is not None and text.get_visible() and text.get_text().strip()}
    boxes["legend"] = fig.legends[0].get_window_extent(renderer)
    panels = {f"panel {index}": ax.get_window_extent(renderer) for index, ax in enumerate(fig.axes)}
    return boxes, panels, fig.bbox


def overlap(a, b, slack=0.5):
    return min(a.x1, b.x1) - max(a.x0, b.x0) > slack and min(a.y1, b.y1) - max(a.y0, b.y0) > slack


def layout_problems(fig):
    boxes, panels, page = placed_texts(fig)
    problems = [f"{name} outside the figure" for name, box in boxes.items()
                if box.x0 < -0.5 or box.y0 < -0.5 or box.x1 > page.x1 + 0.5 or box.y1 > page.y1 + 0.5]
    problems += [f"{a} overlaps {b}" for (a, box_a), (b, box_b) in itertools.combinations(boxes.items(), 2)
                 if overlap(box_a, box_b)]
    problems += [f"{name} overlaps {panel}" for name in ("title", "legend") for panel, box in panels.items()
                 if overlap(boxes[name], box)]
    problems += [f"{name} leaves its panel" for name, box in boxes.items() if " total " in name
                 and not panels[name.split(" total ")[0]].contains(box.x0, box.y1 - 0.5)]
    return problems


@pytest.mark.parametrize("case", sorted(FIGURES))
def test_no_text_overlaps_or_leaves_the_figure(edition, case):
    fig = plots.budget_by_stage(**FIGURES[case])
    problems = layout_problems(fig)
    assert not problems, f"{edition}, {case}: " + "; ".join(problems)
    boxes, _, _ = placed_texts(fig)
    assert sum(" tick " in name for name in boxes) >= 4 * len(fig.axes) and "legend" in boxes, "nothing was measured"


def test_the_check_sees_an_overlap(edition):
    """The same figure squeezed to 3.2 inches: the check must find what a reader would see."""
    fig = plots.budget_by_stage(**FIGURES["widget, one panel"])
    fig.set_size_inches(3.2, 3.8)
    assert any("overlaps" in problem or "outside" in problem for problem in layout_problems(fig))
