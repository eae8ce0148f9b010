"""Measured next to predicted: the prediction comes from zerolab.engine.memory.estimate, per rank and per component.

The paper's accounting gives parameters, gradients, master weights and Adam states; DeepSpeed's accounting
gives the fp32 gradient partition the paper does not count. On CPU ranks the "GPU" and the host are the same
memory, so a component's prediction per rank is its GPU share plus its host share divided by the ranks.
Where measured and predicted differ by more than 1%, a note says why, when the reason is known.
"""
from dataclasses import dataclass, field

from zerolab.base.i18n import tr
from zerolab.engine import muon
from zerolab.engine.memory import MASTER_BYTES, estimate
from zerolab.run.measure import COMPONENTS
from zerolab.engine.units import format_bytes

TOLERANCE = 0.01
LABELS = {
    "param_bytes": "parameters",
    "grad_bytes": "gradients",
    "fp32_grad_bytes": "fp32 gradients",
    "master_weight_bytes": "fp32 master weights",
    "optimizer_state_bytes": "Adam states (m, v)",
    "peak_memory_bytes": "peak memory",
}
MUON_LABEL = "Muon momentum + Adam states"
BF16_LABELS = {  # with bf16.bf16_master_weights_and_grads (and bf16_optimizer_states for the moments)
    "fp32_grad_bytes": "bf16 gradients for the optimizer",
    "master_weight_bytes": "bf16 master weights",
    "optimizer_state_bytes": "Adam states (m, v), bf16",
}


def label(key, setup):
    """The row's name for this run: the dtype it names is the one the run keeps."""
    if key == "optimizer_state_bytes" and setup.get("update_rule") == "muon":
        return MUON_LABEL
    low_precision = setup.get("moments" if key == "optimizer_state_bytes" else "master", "fp32") == "bf16"
    return BF16_LABELS[key] if low_precision and key in BF16_LABELS else LABELS[key]
_PAPER_NAMES = {"param_bytes": "params", "grad_bytes": "grads", "master_weight_bytes": "master_weights",
                "optimizer_state_bytes": "optimizer_states"}


def predict(params, stage, ranks, offload_optimizer, offload_param, precision, largest_layer, master="fp32",
            moments="fp32"):
    """Per-rank bytes of each component for ``ranks`` ranks on one node, from zerolab.engine.memory.estimate. With bf16
    master weights (``master``) the optimizer's gradient partition is bf16 too: half of DeepSpeed's fp32 term."""
    options = dict(gpus_per_node=ranks, offload_optimizer=offload_optimizer, offload_param=offload_param,
                   precision=precision)
    paper = estimate(params, stage, accounting="paper", master=master, moments=moments, **options)
    deepspeed = estimate(params, stage, accounting="deepspeed", largest_layer_params=largest_layer, **options)

    def per_rank(result, name):
        parts = result.breakdown
        return round(parts["gpu"].get(name, 0) + (parts["cpu"].get(name, 0) + parts["nvme"].get(name, 0)) / ranks)

    predicted = {key: per_rank(paper, name) for key, name in _PAPER_NAMES.items()}
    predicted["fp32_grad_bytes"] = per_rank(deepspeed, "fp32_grads") * MASTER_BYTES[master] // MASTER_BYTES["fp32"]
    return {key: predicted[key] for key in COMPONENTS}


def predict_muon(predicted, layout, stage, ranks, precision):
    """Per rank: ``predicted`` with the master weights and the optimizer states of DeepSpeed's Muon
    (zerolab.engine.muon.rank_bytes), which differ between ranks at stages 1-2; ``layout`` is [(shape, whether
    Muon steps it)] in the model's order."""
    shapes, tagged = [shape for shape, _ in layout], [muon_step for _, muon_step in layout]
    found = []
    for rank in range(ranks):
        held = muon.rank_bytes(shapes, tagged, stage, ranks, rank, precision)
        found.append(dict(predicted, master_weight_bytes=held["master_weights"],
                          optimizer_state_bytes=held["momentum"] + held["adam_moments"]))
    return found


def relative_difference(measured, predicted):
    if predicted == 0:
        return 0.0 if measured == 0 else None
    return (measured - predicted) / predicted


@dataclass
class RunResult:
    """One real run: its config, what each rank measured, the prediction next to it, and the loss curve."""

    config: dict
    setup: dict  # stage, offload_optimizer, offload_param, precision, ranks, device, params, steps, model
    ranks: list
    predicted: dict
    loss: list = field(default_factory=list)
    predicted_traffic: list = None  # per rank: zerolab.engine.deepspeed_traffic.step_traffic for one optimizer step
    predicted_ranks: list = None  # per rank, where ranks differ by design (Muon at stages 1-2); else ``predicted``

    def measured_traffic(self, rank=0):
        """What the meter recorded on ``rank`` in the last optimizer step (zerolab.run.meter)."""
        steps = self.ranks[rank].get("measured_traffic") or []
        return steps[-1] if steps else None

    def traffic_table(self):
        """Measured traffic per rank (last step) next to zerolab.engine.comm's DeepSpeed 0.19.8 model, as text."""
        if self.predicted_traffic is None or self.measured_traffic() is None:
            return ""
        ranks = range(len(self.ranks))
        header = ["per rank, last optimizer step"] + [f"rank {r} {what}" for r in ranks
                                                      for what in ("measured", "predicted")]
        measured = [traffic_totals(self.measured_traffic(r)) for r in ranks]
        predicted = [traffic_totals(self.predicted_traffic[r]) for r in ranks]
        body = []
        for key in sorted(set().union(*measured, *predicted)):
            body.append([key] + [f"{table.get(key, 0):,}" for r in ranks for table in (measured[r], predicted[r])])
        widths = [max(len(row[i]) for row in [header] + body) for i in range(len(header))]
        lines = ["traffic: measured by zerolab.run.meter, predicted by zerolab.engine.deepspeed_traffic.step_traffic "
                 "(DeepSpeed 0.19.8's accounting; bytes are each collective's buffer, not ring wire bytes)"]
        for row in [header] + body:
            lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        return "\n".join(lines)

    def rows(self):
        """(component, measured per rank, predicted, relative difference of the worst rank, note)."""
        rows = []
        for key in COMPONENTS:
            measured = [rank[key] for rank in self.ranks]
            expected = [ranks[key] for ranks in self.predicted_ranks] if self.predicted_ranks else \
                [self.predicted[key]] * len(measured)
            worst = max(range(len(measured)), key=lambda r: abs(measured[r] - expected[r]))
            worst, predicted = measured[worst], expected[worst]
            difference = relative_difference(worst, predicted)
            said = note(key, worst, predicted, difference, self.setup, self.config)
            if said is None and len(set(expected)) > 1:
                said = tr("DeepSpeed's Muon: a matrix straddling two ranks' partitions keeps its whole momentum on "
                          "both, so the ranks differ; predicted per rank: ") + ", ".join(_bytes(b) for b in expected)
            rows.append((key, measured, predicted, difference, said))
        peaks = [rank["peak_memory_bytes"] for rank in self.ranks]
        states = sum(self.ranks[0][key] for key in COMPONENTS)
        rows.append(("peak_memory_bytes", peaks, None, None,
                     f"the whole process ({self.setup['device']}): runtime, activations, buffers; the model states "
                     f"above are {100 * states / max(peaks[0], 1):.1f}% of rank 0's peak"))
        return rows

    def table(self, yours=None):
        """The comparison as text; ``yours`` (component -> bytes, keys as in zerolab.engine.memory: params, grads,
        master_weights, optimizer_states) adds a column with your own prediction."""
        s = self.setup
        lines = [f"stage {s['stage']}, offload_optimizer={s['offload_optimizer']}, offload_param={s['offload_param']}, "
                 f"{s['precision']}, {s['ranks']} {s['device'].upper()} ranks, {s['params']:,} parameters, "
                 f"{s['steps']} steps",
                 f"loss {self.loss[0]:.3f} -> {self.loss[-1]:.3f}; step time {self.ranks[0]['step_time_s']:.3f} s "
                 f"(rank 0, median); prediction: zerolab.engine.memory.estimate, paper accounting (fp32 gradients: "
                 f"DeepSpeed accounting)", ""]
        header = (["component"] + (["yours"] if yours else []) + [f"rank {rank['rank']}" for rank in self.ranks]
                  + ["predicted", "diff", "note"])
        mine = {key: (yours or {}).get(name) for key, name in _PAPER_NAMES.items()}
        body, notes = [], []
        for key, measured, predicted, difference, text in self.rows():
            mark = ""
            if text:
                notes.append(text)
                mark = f"[{len(notes)}]"
            show = _megabytes if key == "peak_memory_bytes" else _bytes
            own = [] if not yours else ["-" if mine.get(key) is None else _bytes(mine[key])]
            body.append([label(key, self.setup)] + own + [show(value) for value in measured]
                        + ["-" if predicted is None else _bytes(predicted), _percent(difference, predicted), mark])
        widths = [max(len(row[i]) for row in [header] + body) for i in range(len(header))]
        for row in [header] + body:
            lines.append("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w)
                                   in enumerate(zip(row, widths))).rstrip())
        lines += [""] + [f"[{i}] {text}" for i, text in enumerate(notes, 1)]
        traffic = self.traffic_table()
        return "\n".join(lines + ([ "", traffic] if traffic else []))

    def as_json(self):
        keys = ("rank",) + COMPONENTS + ("peak_memory_bytes", "step_time_s")
        return {"config": self.config, "setup": self.setup,
                "ranks": [{**{key: rank[key] for key in keys},
                           "measured_traffic": self.measured_traffic(i),
                           "predicted_traffic": self.predicted_traffic[i] if self.predicted_traffic else None}
                          for i, rank in enumerate(self.ranks)],
                "predicted": dict(self.predicted, accounting="paper (fp32_grad_bytes: deepspeed)"),
                "loss": self.loss}

    def plot(self, ax=None):
        """A bar chart of measured (rank 0) against predicted bytes per component."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(7, 3.2))
        names = [tr(label(key, self.setup)) for key in COMPONENTS]
        positions = range(len(COMPONENTS))
        ax.bar([p - 0.2 for p in positions], [self.predicted[k] / 1e3 for k in COMPONENTS], 0.4, label=tr("predicted"))
        ax.bar([p + 0.2 for p in positions], [self.ranks[0][k] / 1e3 for k in COMPONENTS], 0.4,
               label=tr("measured, rank 0"))
        ax.set_xticks(list(positions), names, rotation=20, ha="right")
        ax.set_ylabel(tr("kB per rank"))
        s = self.setup
        ax.set_title(tr(f"stage {s['stage']}, offload opt={s['offload_optimizer']} param={s['offload_param']}, "
                        f"{s['precision']}, {s['ranks']} ranks"))
        ax.legend()
        return ax

    def __repr__(self):
        return self.table()


def traffic_totals(step):
    """{"<op> <dtype> calls": n, "<op> <dtype> bytes": n, ..., "device_to_host_bytes", "host_to_device_bytes"}."""
    totals = {}
    for row in step["collectives"]:
        for field_name in ("calls", "bytes"):
            key = f"{row['op']} {row['dtype']} {field_name}"
            totals[key] = totals.get(key, 0) + row[field_name]
    totals["device_to_host_bytes"] = step["device_to_host_bytes"]
    totals["host_to_device_bytes"] = step["host_to_device_bytes"]
    return totals


def note(key, measured, predicted, difference, setup, config):
    """Why a measured figure differs from its prediction by design, or None when they agree within 1%."""
    if difference is not None and abs(difference) <= TOLERANCE:
        return None
    stage, offload, precision, ranks = setup["stage"], setup["offload_optimizer"], setup["precision"], setup["ranks"]
    zero = config.get("zero_optimization") or {}
    if key == "param_bytes" and stage == 3 and measured > predicted:
        threshold = zero.get("stage3_param_persistence_threshold", 100000)
        return (f"parameters smaller than stage3_param_persistence_threshold ({threshold:,} elements) stay whole on "
                "every rank instead of being partitioned")
    if key == "grad_bytes" and stage == 1 and offload == "none" and measured < predicted:
        return ("DeepSpeed runs stage 1 on stage 2's code (stage_1_and_2.py): at each gradient-accumulation boundary "
                f"(every step with gradient_accumulation_steps = {setup.get('accumulation', 1)}) it reduces the "
                "gradients and keeps only this rank's partition; the paper's P_os keeps all of them")
    if key == "grad_bytes" and offload != "none" and stage < 3 and measured < predicted:
        return ("with offload_optimizer DeepSpeed copies each reduced gradient straight into the fp32 gradient "
                "partition on the host (the fp32 gradients row); no 16-bit gradient partition stays")
    if key == "fp32_grad_bytes" and offload == "none" and measured < predicted:
        return ("DeepSpeed's estimator counts a 4-byte fp32 gradient partition; without offload DeepSpeed builds it "
                "inside step() and frees it again, so after backward it is not resident (the paper does not count it)")
    if key == "fp32_grad_bytes" and predicted == 0 and measured > 0:
        return "an fp32 gradient partition the estimator does not count (the optimizer's .grad)"
    if key == "master_weight_bytes" and precision == "fp32" and measured > predicted:
        return ("training in fp32 the paper needs no separate master copy, but DeepSpeed's stage 1/2 optimizer still "
                "clones its partition (single_partition_of_fp32_groups)")
    if measured > predicted and measured - predicted <= 16 * 4 * ranks:
        return ("partitions are padded so each rank's piece is aligned (stage 1/2 pad the flat buffer to a multiple "
                "of 2 x ranks elements), a few bytes over the prediction")
    return "differs from the prediction by more than 1%, for a reason zerolab does not know: worth a look"


def _bytes(value):
    return f"{value:,}"


def _megabytes(value):
    return format_bytes(value, "MB")


def _percent(difference, predicted):
    if predicted is None:
        return "-"
    if difference is None:
        return "n/a"
    return f"{100 * difference:+.1f}%"


def aligned(rows):
    """Rows of text cells as columns: the first left-aligned, the rest right-aligned, each as wide as its widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width)
                               in enumerate(zip(row, widths))).rstrip() for row in rows)
