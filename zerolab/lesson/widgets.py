"""Interactive ipywidgets views over zerolab.lesson.plots, each with the static figure as fallback.

The static figure is shown instead of the widgets when ipywidgets is missing, when there is no Jupyter kernel,
or when ZEROLAB_STATIC is set (autograder/build.py sets it while executing the solutions, which have no frontend;
GitHub cannot render widgets). While nbgrader grades (NBGRADER_EXECUTION) no figure is drawn at all. On Colab the
setup cell enables the custom widget manager that ipywidgets 8 needs.

A view is displayed once and returns None, so a cell ending in ``widgets.memory_explorer()`` shows it once.
A saved lesson reopened later shows the last figure drawn, not "model not found": scripts/setup.sh (and
binder/postBuild) turn on JupyterLab's "save widget state automatically", so the notebook keeps each view's
state, the figure's PNG included (scripts/student_jupyter.py).
"""
import os

from zerolab.lesson import plots
from zerolab.base.i18n import tr

GPU_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def static_reason():
    """Why widgets cannot render here, or None when they can."""
    if os.environ.get("ZEROLAB_STATIC") or os.environ.get("NBGRADER_EXECUTION"):
        return tr("static figures requested")
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return tr("ipywidgets is not installed")
    shell = get_ipython()
    if shell is None or not hasattr(shell, "kernel"):
        return tr("no Jupyter kernel")
    return None


def _view(draw, controls, static_args):
    """Show controls + a figure redrawn on every change; or, where widgets cannot render, the static figure.

    Returns None: the view is displayed here, and a returned widget would be displayed a second time.
    """
    if os.environ.get("NBGRADER_EXECUTION"):  # no test reads a figure; drawing one cost each graded notebook 0.5 s
        print(tr("The figure is drawn in the lesson, not while grading."))
        return
    reason = static_reason()
    if reason:
        print(tr(f"Static figure ({reason}); in Jupyter with ipywidgets this is an interactive view."))
        plots.show(draw(**static_args))
        return
    import ipywidgets as w
    from IPython.display import display

    out = w.Output()

    def redraw(change=None):
        with out:
            out.clear_output(wait=True)
            try:
                plots.show(draw(**{name: control.value for name, control in controls.items()}))
            except ValueError as error:  # bad input typed into a text box: one line, no traceback
                print(f"zerolab: {error}")

    for control in controls.values():
        control.observe(redraw, names="value")
    rows = [w.HBox(list(controls.values())[i:i + 3]) for i in range(0, len(controls), 3)]
    box = w.VBox([_saved_view_style(w), *rows, out])
    box.add_class(VIEW_CLASS)
    display(box)
    redraw()


VIEW_CLASS = "zerolab-view"
# A lesson reopened later shows the view saved with the notebook: its last figure, and controls that no kernel
# answers. ipywidgets marks every one of its boxes and controls with a broken-link icon then; one line saying what
# to do reads better. A <style> inside the view travels with the saved widget state and needs no Jupyter set-up.
SAVED_VIEW_CSS = """
.{view} .jupyter-widgets-disconnected::before {{ display: none; }}
.{view}.jupyter-widgets-disconnected::before {{
  content: "{hint}"; display: block; font: 13px/1.5 var(--jp-ui-font-family, sans-serif); color: #a94442;
  padding: 0 0 6px 0;
}}"""


def _saved_view_style(w):
    hint = tr("The view saved with this notebook: run the cell again to use its controls.")
    css = SAVED_VIEW_CSS.format(view=VIEW_CLASS, hint=hint.replace("\\", "").replace('"', "'"))
    return w.HTML(f"<style>{css}</style>", layout=w.Layout(display="none"))


def memory_explorer(params="13B", gpus=8, accounting="paper", precision="fp16", seq_len=None, micro_batch=1,
                    recompute="none"):
    """Per-GPU model states of every stage at a GPU count (static: 1, gpus and 64 GPUs side by side).

    With ``seq_len``: the whole budget with activations, and sequence, micro-batch and recomputation controls."""
    if seq_len is not None:
        return _budget_explorer(params, gpus, precision, seq_len, micro_batch, recompute)
    controls = {}
    if static_reason() is None:
        import ipywidgets as w

        controls = {
            "params": w.Text(value=str(params), description=tr("params")),
            "gpus": w.SelectionSlider(options=GPU_COUNTS, value=gpus, description=tr("GPUs")),
            "accounting": w.Dropdown(options=["paper", "deepspeed"], value=accounting, description=tr("accounting")),
            "precision": w.Dropdown(options=["fp16", "bf16", "fp32"], value=precision, description=tr("precision")),
        }

    def draw(params, gpus, accounting, precision, gpu_counts=None):
        return plots.memory_by_stage(params, gpu_counts or (gpus,), accounting=accounting, precision=precision)

    counts = tuple(sorted({1, gpus, 64}))
    return _view(draw, controls, dict(params=params, gpus=gpus, accounting=accounting, precision=precision,
                                      gpu_counts=counts))


def offload_explorer(params="13B", world_size=8, grad_accum=1, host_link="pcie4"):
    """ZeRO-2 with and without CPU offload: memory, and the PCIe bytes and seconds per optimizer step."""
    controls = {}
    if static_reason() is None:
        import ipywidgets as w

        controls = {
            "params": w.Text(value=str(params), description=tr("params")),
            "world_size": w.SelectionSlider(options=GPU_COUNTS, value=world_size, description=tr("GPUs")),
            "grad_accum": w.IntSlider(value=grad_accum, min=1, max=32, description="grad_accum"),
            "host_link": w.Dropdown(options=["pcie3", "pcie4", "pcie5"], value=host_link, description=tr("host link")),
        }
    return _view(plots.offload_traffic, controls,
                 dict(params=params, world_size=world_size, grad_accum=grad_accum, host_link=host_link))


def overlap_explorer(params="13B", stage=2, world_size=8, compute_s=1.0, grad_accum=1, link="ib-hdr"):
    """One optimizer step on a timeline, without and with overlap_comm."""
    controls = {}
    if static_reason() is None:
        import ipywidgets as w

        controls = {
            "params": w.Text(value=str(params), description=tr("params")),
            "stage": w.Dropdown(options=[0, 1, 2, 3], value=stage, description=tr("stage")),
            "world_size": w.SelectionSlider(options=GPU_COUNTS[1:], value=world_size, description=tr("GPUs")),
            "compute_s": w.FloatLogSlider(value=compute_s, base=10, min=-2, max=1, description=tr("compute (s)")),
            "grad_accum": w.IntSlider(value=grad_accum, min=1, max=32, description="grad_accum"),
            "link": w.Dropdown(options=list(_links()), value=link, description=tr("link")),
        }
    return _view(plots.overlap_timeline, controls,
                 dict(params=params, stage=stage, world_size=world_size, compute_s=compute_s,
                      grad_accum=grad_accum, link=link))


def _links():
    from zerolab.engine import comm

    return [name for name in comm.BANDWIDTHS if not name.startswith("pcie")]


def _budget_explorer(model, gpus, precision, seq_len, micro_batch, recompute):
    """memory_explorer with a sequence length: the whole per-GPU budget, activations included, of every stage.

    Static fallback: the fixed set recompute none / selective / full side by side."""
    controls = {}
    if static_reason() is None:
        import ipywidgets as w

        controls = {
            "model": w.Text(value=str(model), description=tr("model")),
            "gpus": w.SelectionSlider(options=GPU_COUNTS, value=gpus, description=tr("GPUs")),
            "precision": w.Dropdown(options=["bf16", "fp16", "fp32"], value=precision, description=tr("precision")),
            "seq_len": w.SelectionSlider(options=SEQ_LENS, value=seq_len, description=tr("sequence")),
            "micro_batch": w.IntSlider(value=micro_batch, min=1, max=64, description=tr("micro-batch")),
            "recompute": w.Dropdown(options=["none", "selective", "full"], value=recompute,
                                    description=tr("recompute")),
        }

    def draw(model, gpus, precision, seq_len, micro_batch, recompute=None, recomputes=None):
        return plots.budget_by_stage(model, gpus, seq_len, micro_batch, recomputes or (recompute,), precision)

    return _view(draw, controls, dict(model=model, gpus=gpus, precision=precision, seq_len=seq_len,
                                      micro_batch=micro_batch, recomputes=("none", "selective", "full")))


SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
