"""Static matplotlib figures over zerolab.engine.memory and zerolab.engine.comm. Every number drawn comes from those functions.

Each function returns a matplotlib Figure (no pyplot state, so nothing is drawn twice); ``show(fig)`` displays
it as a PNG in a notebook, which works with any backend and in executed notebooks on GitHub.
matplotlib is imported inside the functions, so importing zerolab stays light.
"""
from zerolab.engine import comm, memory, units
from zerolab.base.i18n import language, tr

STAGE_NAMES = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}
COLORS = {"params": "#4C72B0", "grads": "#55A868", "master_weights": "#C44E52", "optimizer_states": "#8172B2",
          "fp32_grads": "#CCB974", "gathered_layer": "#64B5CD", "buffer": "#BBBBBB", "model_load_fp32": "#DD8452"}


def _figure(width=9, height=3.6, cols=1, rows=1, **options):
    from matplotlib.figure import Figure

    if language() == "zh":  # Chinese text needs a CJK font even where zerolab.base.i18n.activate() was not run
        from zerolab.base import fonts
        fonts.use_cjk_font()

    fig = Figure(figsize=(width, height), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False, **options)
    return fig, [ax for row in axes for ax in row]


def show(fig):
    """Display a Figure as a PNG image in the current notebook output."""
    import io

    from IPython.display import Image, display

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    display(Image(data=buffer.getvalue(), format="png"))


def _short(value):
    """A bar's value in three significant figures or fewer (the unit is on the axis): 1,400 / 27.2 / 3.57."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def memory_by_stage(params, gpu_counts=(1, 8, 64), accounting="paper", precision="fp16", unit=None):
    """Per-GPU model-state memory of each ZeRO stage, stacked by what it is made of, one panel per GPU count.

    The unit follows the accounting unless given: the paper counts GB (10**9), DeepSpeed's estimator GiB (2**30).
    """
    params = units.parse_count(params)
    unit = unit or ("GiB" if accounting == "deepspeed" else "GB")
    fig, axes = _figure(width=9, height=3.8, cols=len(gpu_counts), sharey=True)
    scale = {"GB": units.GB, "GiB": units.GiB}[unit]
    seen = {}
    for ax, gpus in zip(axes, gpu_counts):
        for stage in memory.STAGES:
            est = memory.estimate(params, stage, gpus_per_node=gpus, accounting=accounting, precision=precision)
            bottom = 0.0
            for part, nbytes in est.breakdown["gpu"].items():
                seen[part] = ax.bar(STAGE_NAMES[stage], nbytes / scale, bottom=bottom, color=COLORS.get(part, "#999"))
                bottom += nbytes / scale
            ax.text(STAGE_NAMES[stage], bottom, _short(est.gpu_bytes / scale), ha="center", va="bottom", fontsize=8)
        # a named field: an open template "{} GPUs" would also match lesson messages ending in " GPUs"
        ax.set_title((tr("{gpus} GPUs") if gpus > 1 else tr("{gpus} GPU")).format(gpus=gpus), fontsize=9)
        ax.tick_params(axis="x", labelsize=8, labelrotation=30 if len(gpu_counts) > 2 else 0)
        ax.tick_params(axis="y", labelsize=8)
        ax.margins(y=0.18)
    axes[0].set_ylabel(tr(f"model states per GPU ({unit})"), fontsize=9)
    fig.suptitle(tr(f"{units.format_count(params)} parameters, {precision}, {tr(accounting)} accounting ({unit})"),
                 fontsize=10)
    fig.legend(list(seen.values()), [tr(part.replace("_", " ")) for part in seen], loc="outside lower center",
               ncols=min(len(seen), 4), fontsize=8, frameon=False)
    return fig


def offload_traffic(params, world_size=8, grad_accum=1, host_link="pcie4", precision="fp16"):
    """ZeRO-2 without and with CPU optimizer offload: memory per GPU and per node, and what crosses PCIe per step."""
    params = units.parse_count(params)
    fig, (mem_ax, link_ax) = _figure(width=10, cols=2)
    labels = ["ZeRO-2", tr("ZeRO-2 + CPU offload")]
    estimates = [memory.estimate(params, 2, gpus_per_node=world_size, offload_optimizer=device, precision=precision)
                 for device in ("none", "cpu")]
    places = ((tr("GPU (per GPU)"), "gpu_bytes"), (tr("host RAM (per node)"), "cpu_bytes"))
    for offset, (place, attr) in enumerate(places):
        values = [getattr(est, attr) / units.GB for est in estimates]
        bars = mem_ax.bar([i + offset * 0.4 for i in range(2)], values, width=0.4, label=place)
        mem_ax.bar_label(bars, [units.format_bytes(getattr(est, attr)) for est in estimates], fontsize=8)
    mem_ax.set_xticks([0.2, 1.2], labels)
    mem_ax.set_ylabel(tr("model states (GB)"))
    mem_ax.legend(fontsize=8)
    mem_ax.margins(y=0.15)
    t = comm.traffic(params, 2, world_size, grad_accum=grad_accum, precision=precision, offload_optimizer="cpu")
    moves = {tr("GPU -> host\n(gradients)"): t.device_to_host_bytes,
             tr("host -> GPU\n(parameters)"): t.host_to_device_bytes}
    bars = link_ax.bar(list(moves), [b / units.GB for b in moves.values()], color=["#C44E52", "#4C72B0"])
    link_ax.bar_label(bars, [tr(f"{units.format_bytes(b)}\n{comm.transfer_time(b, host_link):.2f} s at {host_link}")
                             for b in moves.values()], fontsize=8)
    link_ax.set_ylabel(tr("bytes per GPU per step (GB)"))
    link_ax.set_title(tr(f"PCIe traffic per optimizer step, grad_accum={grad_accum}"), fontsize=10)
    link_ax.margins(y=0.3)
    fig.suptitle(tr(f"{units.format_count(params)} parameters on {world_size} GPUs"), fontsize=10)
    return fig


def overlap_timeline(params, stage=2, world_size=8, compute_s=1.0, grad_accum=1, link="nvlink3", host_link="pcie4",
                     offload_optimizer="none"):
    """One optimizer step without and with overlap_comm: compute, then the communication hidden behind it and exposed."""
    params = units.parse_count(params)
    t = comm.traffic(params, stage, world_size, grad_accum=grad_accum, offload_optimizer=offload_optimizer)
    fig, axes = _figure(width=10, height=3.2, rows=2, sharex=True)
    forward_s = compute_s * (1 - comm.BACKWARD_SHARE)
    for ax, overlap in zip(axes, (False, True)):
        step = comm.step_time(t, compute_s, link=link, host_link=host_link, overlap_comm=overlap)
        ax.broken_barh([(0, forward_s), (forward_s, compute_s - forward_s)], (1, 0.8),
                       facecolors=["#4C72B0", "#55A868"])
        label = _bar_labeller(ax, span=max(compute_s + step.exposed_s, 1e-12))
        label(0, forward_s, 1.4, tr("forward"))
        label(forward_s, compute_s - forward_s, 1.4, tr("backward"))
        if step.hidden_s > 0:
            ax.broken_barh([(compute_s - step.hidden_s, step.hidden_s)], (0, 0.8), facecolors="#8172B2")
            label(compute_s - step.hidden_s, step.hidden_s, 0.4, tr("hidden"))
        ax.broken_barh([(compute_s, step.exposed_s)], (0, 0.8), facecolors="#C44E52")
        label(compute_s, step.exposed_s, 0.4, tr("exposed"))
        ax.set_yticks([0.4, 1.4], [tr("communication"), tr("compute")])
        ax.set_title(tr(f"overlap_comm={overlap}: step {step.total_s:.2f} s "
                        f"({step.exposed_s:.2f} s of {step.comm_s + step.host_s:.2f} s communication exposed)"),
                     fontsize=9, loc="left")
    axes[-1].set_xlabel(tr("seconds"))
    fig.suptitle(tr(f"{STAGE_NAMES[stage]}, {units.format_count(params)} parameters, {world_size} GPUs, link {link}, "
                    f"grad_accum={grad_accum}, compute {compute_s:.3g} s"), fontsize=10)
    return fig


def _bar_labeller(ax, span, min_share=0.09):
    """Write a label inside a bar segment only when the segment is wide enough to hold it (else it would spill)."""
    def label(start, width, y, text):
        if width / span >= min_share:
            ax.text(start + width / 2, y, text, ha="center", va="center", color="white", fontsize=8, clip_on=True)
    return label


def measured_vs_predicted(results):
    """One row per real run (zerolab.run RunResult): predicted against measured bytes per component, rank 0."""
    results = list(results)
    fig, axes = _figure(width=9, height=1.2 + 2.3 * len(results), rows=len(results), sharex=True)
    for ax, result in zip(axes, results):
        result.plot(ax=ax)
        ax.title.set_fontsize(9)
        ax.get_legend().remove()  # one legend for all rows, below them, where it covers no bar
        ax.tick_params(labelsize=8)
        ax.margins(y=0.1)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=8, frameon=False)
    return fig


BUDGET_COLORS = {"model_states": "#4C72B0", "communication_buckets": "#CCB974", "activations": "#DD8452",
                 "cuda_context": "#8C8C8C", "fragmentation": "#BBBBBB"}


def budget_by_stage(model="13B", gpus=8, seq_len=2048, micro_batch=1, recomputes=("none",), precision="bf16",
                    gpu_memory=None):
    """The whole per-GPU budget (zerolab.sizing.budget) of each ZeRO stage without offload, one panel per recomputation.

    ``model`` is a preset name ('llama2-7b') or a parameter count ('13B', a GPT-3-shaped decoder).
    Laid out so no text overlaps in either edition (tests/test_plots_layout.py): panels wide enough for four stage
    names, the legend at the right below the title, and the title on two lines when one is wider than the figure.
    """
    from zerolab.sizing import budget
    from zerolab.engine import models

    decoder = models.PRESETS.get(str(model).lower()) or models.from_params(units.parse_count(model))
    fig, axes = _figure(width=3.0 * len(recomputes) + 2.3, height=3.8, cols=len(recomputes), sharey=True)
    seen = {}
    for ax, recompute in zip(axes, recomputes):
        for stage in memory.STAGES:
            plan = budget.budget(decoder, stage, seq_len, micro_batch, gpus_per_node=gpus, precision=precision,
                                 recompute=recompute)
            bottom = 0.0
            for line, nbytes in plan.gpu.items():
                seen[line] = ax.bar(STAGE_NAMES[stage], nbytes / units.GB, bottom=bottom, color=BUDGET_COLORS[line])
                bottom += nbytes / units.GB
            ax.text(STAGE_NAMES[stage], bottom, _short(plan.gpu_bytes / units.GB), ha="center", va="bottom",
                    fontsize=8)  # GB, as on the axis: a short number fits above its bar
        if gpu_memory:
            ax.axhline(gpu_memory / units.GB, color="black", linestyle="--", linewidth=1)
        ax.set_title(tr(f"recompute: {recompute}"), fontsize=9)
        ax.tick_params(labelsize=8)
        ax.margins(y=0.15)
    axes[0].set_ylabel(tr("per GPU (GB)"), fontsize=9)
    # "outside right center": at the right of the panels and below the title, which spans the whole width
    fig.legend(list(seen.values()), [tr(line).replace("_", " ") for line in seen], loc="outside right center",
               fontsize=8, frameon=False)
    _title(fig, tr(f"{decoder.name} ({units.format_count(decoder.params())} parameters), {gpus} GPUs, sequence "
                   f"{seq_len}, micro-batch {micro_batch}, {precision}, flash attention"), fontsize=10)
    return fig


def _title(fig, text, fontsize):
    """The figure's title; broken in two at the comma nearest its middle when one line is wider than the figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    title = fig.suptitle(text, fontsize=fontsize)
    renderer = FigureCanvasAgg(fig).get_renderer()
    if title.get_window_extent(renderer).width > 0.95 * fig.bbox.width:
        breaks = [i + len(comma) for comma in (", ", "，") for i in range(len(text)) if text.startswith(comma, i)]
        if breaks:
            cut = min(breaks, key=lambda i: abs(2 * i - len(text)))
            title.set_text(text[:cut].rstrip() + "\n" + text[cut:].lstrip())
    while title.get_window_extent(renderer).width > 0.95 * fig.bbox.width and title.get_fontsize() > 6:
        title.set_fontsize(title.get_fontsize() - 0.5)
    return title


def side_by_side(rows):
    """Lesson 08's measured side-by-side (rows of zerolab.handmade.side_by_side.rows): bytes one rank holds, and the
    paper's volume it moves per step by collective, for each system."""
    fig, (mem_ax, comm_ax) = _figure(width=11, height=4.8, cols=2)
    names = [row["system"] for row in rows]
    parts = (("param_bytes", tr("parameters (after step)"), COLORS["params"]),
             ("peak_param_bytes", tr("parameters (peak)"), COLORS["gathered_layer"]),
             ("peak_grad_bytes", tr("gradients (peak in backward)"), COLORS["grads"]),
             ("optimizer_bytes", tr("Adam moments"), COLORS["optimizer_states"]),
             ("master_bytes", tr("fp32 master"), COLORS["master_weights"]))
    width = 0.8 / len(parts)
    for i, (key, label, color) in enumerate(parts):
        mem_ax.barh([y + (i - len(parts) / 2 + 0.5) * width for y in range(len(rows))],
                    [row[key] / 1024 for row in rows], height=width, color=color, label=label)
    mem_ax.set_yticks(range(len(rows)), names, fontsize=8)
    mem_ax.invert_yaxis()
    mem_ax.set_xlabel(tr("KiB on rank 0"))
    mem_ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=3)
    ops = sorted({op for row in rows for op in row["traffic"]})
    left = [0.0] * len(rows)
    palette = {"all-gather": COLORS["params"], "reduce-scatter": COLORS["grads"], "all-reduce": COLORS["fp32_grads"],
               "reduce": COLORS["optimizer_states"]}
    for op in ops:
        shares = [row["volume_by_op"].get(op, 0.0) for row in rows]
        comm_ax.barh(range(len(rows)), shares, left=left, color=palette.get(op, COLORS["buffer"]), label=op)
        left = [a + b for a, b in zip(left, shares)]
    comm_ax.set_yticks(range(len(rows)), [""] * len(rows))
    comm_ax.invert_yaxis()
    comm_ax.set_xlabel(tr("volume per step (Ψ; an all-reduce counts twice)"))
    comm_ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=4)
    fig.suptitle(tr("The same model, data and 2 ranks, measured"), fontsize=10)
    return fig
