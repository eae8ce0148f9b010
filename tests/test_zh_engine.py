"""The Chinese edition's engine side: zerolab's own messages (checks' feedback, widget labels, plot text) have
catalog entries, the plots render in Chinese with no missing glyph, and a real kernel running a Chinese notebook
turns a checks helper's failure into Chinese while the same notebook without the language gives English."""
import ast
import io
import itertools
import json
import re
import sys
import warnings
from pathlib import Path

import nbformat
import pytest

import zerolab.base.i18n
from zerolab.lesson import checks, plots
from zerolab.base import fonts
from zerolab.base.i18n import catalog, translate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lesson_messages import template  # noqa: E402

ZEROLAB = Path(zerolab.base.i18n.__file__).resolve().parent.parent
CATALOG = ZEROLAB / "base" / "locale" / "zh" / "zerolab.json"
CJK = re.compile(r"[\u4e00-\u9fff]")


def variants(node):
    """Every catalog key a message expression can produce: a conditional gives both branches; None when a part is
    not a literal."""
    if isinstance(node, ast.IfExp):
        return variants(node.body) | variants(node.orelse)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return {None if None in (left, right) else left + right
                for left, right in itertools.product(variants(node.left), variants(node.right))}
    return {template(node)}


FEEDBACK = {"checks.py", "grade.py", "harness.py", "source.py", "rank.py", "verdict.py"}  # zerolab/lesson/, handmade/
LITERAL = (ast.Constant, ast.JoinedStr, ast.BinOp, ast.IfExp)


def engine_messages():
    """[(file:line, keys)] of every tr() call with a literal argument in zerolab/, and of the feedback the lessons'
    tests raise: the literal messages raised in zerolab/lesson/checks.py and zerolab/handmade/ (lesson 08), and the
    problems lesson 08's verdict and harness return."""
    found = []
    for path in sorted(ZEROLAB.rglob("*.py")):
        where = path.relative_to(ZEROLAB.parent)
        handmade = "handmade" in where.parts
        feedback = path.name in FEEDBACK and (handmade or path.parent.name == "lesson")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            message = None
            if feedback and isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args \
                    and isinstance(node.exc.args[0], LITERAL):
                message = node.exc.args[0]
            elif feedback and isinstance(node, ast.Assert) and node.msg is not None:
                message = node.msg
            elif feedback and handmade and isinstance(node, ast.Return) \
                    and isinstance(node.value, LITERAL):
                message = node.value
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "tr" and node.args \
                    and isinstance(node.args[0], LITERAL):
                message = node.args[0]
            elif path.parent.name == "config" and isinstance(node, ast.Call) \
                    and getattr(node.func, "id", None) == "Finding" and len(node.args) == 3:
                message = node.args[2]  # the doctor's findings, shown with str(finding) (zerolab/config/findings.py)
            if message is not None:
                # two values side by side cannot be told apart: the catalog spells out their cases instead
                keys = {key for key in variants(message) if key is None or "{}{}" not in key}
                if handmade or path.parent.name == "config":  # messages passed along are no literal
                    keys.discard(None)
                found.append((f"{where}:{node.lineno}", keys))
    return found


def placeholders(text):
    return len(re.findall(r"\{\d*\}", text))


def test_every_engine_message_has_a_catalog_entry():
    found = engine_messages()
    assert sum(1 for where, _ in found if where.startswith("zerolab/lesson/checks.py")) >= 25  # the scan sees checks.py
    assert any(where.startswith("zerolab/lesson/plots.py") for where, _ in found)
    assert sum(1 for where, _ in found if where.startswith("zerolab/handmade/zero1/verdict.py")) >= 20
    assert sum(1 for where, _ in found if where.startswith("zerolab/config/checks.py")) >= 12
    zh = catalog("zh")
    # a message that is only its values, such as "{}: {}", needs no entry (and one would match every such text)
    missing = [(where, key) for where, keys in found for key in keys
               if key not in zh and re.search(r"[A-Za-z]", key.replace("{}", ""))]
    assert not missing, f"not in zerolab/base/locale/zh/zerolab.json: {missing}"


def test_catalog_format_and_placeholders():
    text = CATALOG.read_text(encoding="utf-8")
    entries = json.loads(text)
    assert text == json.dumps(entries, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    for english, chinese in entries.items():
        assert placeholders(chinese) == english.count("{}"), english
        values = [f"<{i}>" for i in range(english.count("{}"))]
        named = {name: f"<{name}>" for name in re.findall(r"\{([a-z]+)\}", english)}  # closed keys: "{gpus} GPUs"
        shown = chinese.format(*values, **named)
        assert all(value in shown for value in values + list(named.values())), english  # each value shown
        assert chinese.strip() and chinese != english, english


def test_a_templates_values_are_translated_with_it():
    # The default name and a catalogued hint inside a checks message come out in Chinese too.
    with pytest.raises(AssertionError) as raised:
        checks.close_to(12, 10, "your answer", 1e-3, "GB", hint="True/False is not a number")
    english = raised.value.args[0]
    assert english == "your answer is not right: True/False is not a number"
    assert translate(english) == "你的答案 不对：True/False 不是数值"
    assert translate(english, "en") == english
    assert translate("stage is not right") == "stage 不对"  # a name that is code stays code


def test_lesson08_feedback_built_from_parts_comes_out_whole(monkeypatch, tmp_path):
    from zerolab.handmade.core import harness

    error = {"type": "ZeroDivisionError", "message": "division by zero", "line": 3, "in_learner_code": True}
    (tmp_path / "rank1.error.json").write_text(json.dumps(error))
    job = {"source": "x = 1\ny = 2\nz = 1 / 0\n", "collective_timeout": 20}
    monkeypatch.setenv("ZEROLAB_LANG", "zh")
    zerolab.base.i18n.language.cache_clear()
    try:
        message = harness._failure_message(str(tmp_path), 2, "", job)
    finally:
        zerolab.base.i18n.language.cache_clear()
    assert message == "rank 1（共 2 个）抛出了 ZeroDivisionError，位于你的单元格第 3 行（z = 1 / 0）: division by zero"
    sharded = ("with 2 ranks, rank 0 keeps 10900 bytes alive besides its parameters, gradients and communication "
               "buffers, more than 1/2 of AdamW's 19720 bytes of state for the whole model: Adam's moments are not "
               "sharded (every tensor alive in the rank is counted, wherever it is kept)")
    assert "超过了 AdamW 为整个模型保存的状态的 1/2" in translate(sharded) and "19720" in translate(sharded)


def test_the_doctors_findings_print_in_chinese_and_keep_their_english_message(monkeypatch):
    from zerolab.config import check_config

    config = {"train_batch_size": 8, "zero_optimisation": {"stage": 2}}
    english = [str(finding) for finding in check_config(config).findings]
    monkeypatch.setenv("ZEROLAB_LANG", "zh")
    zerolab.base.i18n.language.cache_clear()
    try:
        report = check_config(config)
        chinese = [str(finding) for finding in report.findings]
    finally:
        zerolab.base.i18n.language.cache_clear()
    typo = next(line for line in chinese if "zero_optimisation" in line)
    assert "悄悄忽略" in typo and "你是不是想写 'zero_optimization'" in typo
    assert all(CJK.search(line) for line in chinese) and not any(CJK.search(line) for line in english)
    assert [finding.message for finding in report.findings] == [line.split(": ", 1)[1] for line in english]


def test_explain_config_speaks_chinese(monkeypatch):
    from zerolab.config import explain_config, field_notes, reference

    assert not [what for what, _ in field_notes.NOTES.values() if what not in catalog("zh")]
    configs = [reference.zero2_offload(), reference.zero3_offload(reference.zero2_offload()),
               {"train_batch_size": 32, "gradient_clipping": 1.0, "fp16": {"enabled": True, "loss_scale": 0,
                                                                           "initial_scale_power": 16},
                "bf16": {"enabled": False}, "zero_optimization": {"stage": 1, "overlap_comm": False,
                                                                  "reduce_bucket_size": 5e8}}]
    english = [e.text for config in configs for e in explain_config(config)]
    monkeypatch.setenv("ZEROLAB_LANG", "zh")
    zerolab.base.i18n.language.cache_clear()
    try:
        chinese = [e.text for config in configs for e in explain_config(config)]
    finally:
        zerolab.base.i18n.language.cache_clear()
    assert len(chinese) == len(english) > 20
    # Chinese throughout: no line without Chinese, no English words left running ("optimizer state", "per GPU")
    untranslated = [(en, zh) for en, zh in zip(english, chinese)
                    if not CJK.search(zh) or re.search(r"[a-z]{4} [a-z]{3}", zh)]
    assert not untranslated


@pytest.fixture
def chinese(monkeypatch):
    """A Chinese-edition process: ZEROLAB_LANG=zh and the CJK font; matplotlib's settings restored afterwards."""
    import matplotlib

    monkeypatch.setenv("ZEROLAB_LANG", "zh")
    zerolab.base.i18n.language.cache_clear()
    with matplotlib.rc_context():
        yield
    zerolab.base.i18n.language.cache_clear()


def _run_result():
    """A RunResult shaped as lesson 06's runs (2 CPU ranks, ZeRO-2): only its text is under test here, so the
    'measured' bytes are the prediction itself rather than a real run (tests/test_run_measure.py runs those)."""
    from zerolab.run.report import RunResult, predict

    predicted = predict(10**6, 2, 2, "none", "none", "fp32", 10**5)
    rank = dict(predicted, peak_memory_bytes=10**8, step_time_s=0.1)
    setup = dict(stage=2, offload_optimizer="none", offload_param="none", precision="fp32", ranks=2, device="cpu",
                 params=10**6, steps=2, model="tiny")
    return RunResult(config={}, setup=setup, ranks=[dict(rank, rank=0), dict(rank, rank=1)], predicted=predicted)


FIGURES = {  # the figures lessons draw (through zerolab.lesson.widgets' static views and lesson 06)
    "memory_by_stage": lambda: plots.memory_by_stage("13B", (1, 8, 64)),
    "memory_by_stage_deepspeed": lambda: plots.memory_by_stage("13B", (8,), accounting="deepspeed"),
    "budget_by_stage": lambda: plots.budget_by_stage("llama2-7b", 8, 4096, 1, ("none", "selective", "full")),
    "offload_traffic": lambda: plots.offload_traffic("13B", 8, 4),
    "overlap_timeline": lambda: plots.overlap_timeline("13B", 2, 8, 1.0, link="ib-hdr"),
    "measured_vs_predicted": lambda: plots.measured_vs_predicted([_run_result()]),
}


def _texts(fig):
    """The figure's titles, axis labels and legend entries (what tr() covers), without empty ones."""
    texts = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        texts += [ax.title, ax._left_title, ax.xaxis.label, ax.yaxis.label]
        if ax.get_legend():
            texts += ax.get_legend().get_texts()
    for legend in fig.legends:
        texts += legend.get_texts()
    return [text.get_text() for text in texts if text.get_text()]


def _render(fig):
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=r"Glyph .* missing from font")
        fig.savefig(io.BytesIO(), format="png", dpi=40)


@pytest.mark.parametrize("name", sorted(FIGURES))
def test_chinese_figures_render_without_missing_glyphs(chinese, name):
    import matplotlib

    assert fonts.cjk_family() is not None, "no CJK font: mplfonts (requirements.txt) is missing"
    matplotlib.rcParams["font.sans-serif"] = ["DejaVu Sans"]  # as in a kernel that never ran activate()
    fig = FIGURES[name]()  # zerolab.lesson.plots sets up the CJK font itself (fonts.use_cjk_font) in a Chinese kernel
    texts = _texts(fig)
    assert texts and all(CJK.search(text) for text in texts), [t for t in texts if not CJK.search(t)]
    _render(fig)


def test_the_glyph_check_can_fail(chinese):
    # Without the CJK font the same Chinese figure has boxes for glyphs, and _render says so.
    import matplotlib

    fig = FIGURES["overlap_timeline"]()
    matplotlib.rcParams["font.sans-serif"] = ["DejaVu Sans"]
    matplotlib.rcParams["font.family"] = "sans-serif"
    for text in fig.findobj(matplotlib.text.Text):
        text.set_fontfamily("sans-serif")  # drawn text keeps the font it was made with: make it look again
    with pytest.raises(UserWarning, match="missing from font"):
        _render(fig)


def _run_notebook(folder, metadata):
    """Run a two-cell notebook in a real kernel, cwd `folder`; the evalue of the failing checks call."""
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(metadata=metadata)
    nb.cells = [nbformat.v4.new_code_cell("import zerolab.base.i18n\nzerolab.base.i18n.activate()"),
                nbformat.v4.new_code_cell("from zerolab.lesson.checks import whole\nwhole(3.0)")]
    folder.mkdir()
    nbformat.write(nb, str(folder / "lesson.ipynb"))
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(folder)}}).execute()
    errors = [out for out in nb.cells[1].outputs if out.output_type == "error"]
    assert len(errors) == 1 and errors[0].ename == "AssertionError", nb.cells[1].outputs
    return errors[0].evalue


@pytest.mark.slow
def test_a_kernel_gives_checks_feedback_in_the_notebooks_language(tmp_path, monkeypatch):
    monkeypatch.delenv("ZEROLAB_LANG", raising=False)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    with pytest.raises(AssertionError) as raised:
        checks.whole(3.0)
    english = raised.value.args[0]
    chinese = _run_notebook(tmp_path / "zh", {"zerolab": {"language": "zh"}})
    assert CJK.search(chinese) and "你的答案" in chinese and "3.0" in chinese
    assert chinese == translate(english, "zh")
    assert _run_notebook(tmp_path / "en", {}) == english


def test_the_chinese_readme_has_the_same_quickstart_and_a_lesson_map_slot():
    root = ZEROLAB.parent

    def commands(name, heading):
        text = (root / name).read_text(encoding="utf-8")
        block = re.search(heading + r".*?```bash\n(.*?)```", text, re.S).group(1)
        return [line for line in block.splitlines() if line and not line.startswith("#")]

    assert commands("README.zh.md", "## 快速开始") == commands("README.md", "## Quickstart")
    chinese = (root / "README.zh.md").read_text(encoding="utf-8").splitlines()
    assert "## 课程目录" in chinese and "<!-- lesson-map-zh -->" in chinese and "<!-- /lesson-map-zh -->" in chinese
    assert "README.md" in chinese[2] and "README.zh.md" in (root / "README.md").read_text().splitlines()[2]


def test_lesson_hints_and_slip_messages_are_listed_for_the_catalogs():
    from lesson_messages import feedback_arguments

    cell = ('close_to(x, 5, "x", 1e-6, hint=f"stage {s} divides it", slips={0.5: "counted elements, not bytes"})\n'
            'same_value(y, True, "y", hint="look at the default")\nprint(x, hint)\n')
    assert [key for _, key in feedback_arguments(cell)] == ["stage {} divides it", "counted elements, not bytes",
                                                            "look at the default"]
