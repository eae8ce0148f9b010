"""Plain-text renderings of findings, explanations and effects, shared by the CLI and the lessons."""
from zerolab.engine.units import format_bytes

_UNSET = "<unset>"


def findings_lines(report, notes=True):
    shown = [f for f in report.findings if notes or f.severity != "note"]
    return [str(f) for f in shown]


def verdict(report):
    n_err, n_warn = len(report.errors), len(report.warnings)
    if report.valid:
        extra = f", with {n_warn} warning{'s' * (n_warn != 1)}" if n_warn else ""
        return f"ok: DeepSpeed 0.19.8 would accept this config at world size {report.world_size}{extra}"
    return (f"invalid: {n_err} error{'s' * (n_err != 1)}, {n_warn} warning{'s' * (n_warn != 1)} "
            f"at world size {report.world_size}")


def explanation_lines(explanations):
    lines = []
    for e in explanations:
        default = "" if e.default is None else f" (default {e.default!r})"
        lines.append(f"{e.path} = {e.value!r}{default}: {e.text}")
    return lines


def effect_rows(effect):
    """[(label, value text)] for one Effect."""
    s, m, t = effect.settings, effect.memory, effect.traffic
    unit = "GiB" if m.accounting == "deepspeed" else "GB"
    rows = [("ZeRO stage", str(s.stage)), ("precision", s.precision),
            ("master weights / Adam moments", f"{s.master} / {s.moments}"),
            ("optimizer state on", s.offload_optimizer), ("parameters offloaded to", s.offload_param),
            ("gradient accumulation", str(s.grad_accum)), ("overlap_comm", str(s.overlap_comm)),
            (f"GPU memory per GPU ({m.accounting})", format_bytes(m.gpu_bytes, unit)),
            (f"host memory per node ({m.accounting})", format_bytes(m.cpu_bytes, unit)),
            ("NVMe per node", format_bytes(m.nvme_bytes, unit)),
            ("collective volume per rank per step", f"{t.volume_in_params:g} x params"),
            ("bytes sent per rank per step", format_bytes(t.wire_bytes, "GB")),
            ("collective calls per step", str(t.calls)),
            ("PCIe GPU->host per rank per step", format_bytes(t.device_to_host_bytes, "GB")),
            ("PCIe host->GPU per rank per step", format_bytes(t.host_to_device_bytes, "GB"))]
    if effect.step_time is not None:
        rows.append(("step time (exposed comm)", f"{effect.step_time.total_s:.3f} s ({effect.step_time.exposed_s:.3f} s)"))
    return rows


def effect_lines(effect):
    rows = effect_rows(effect)
    width = max(len(label) for label, _ in rows)
    return [f"  {label:<{width}}  {value}" for label, value in rows]


def comparison_lines(comparison):
    lines = ["fields that differ:"]
    lines += [f"  {path}: {a!r} -> {b!r}" for path, a, b in comparison.changed] or ["  (none)"]
    rows_a, rows_b = effect_rows(comparison.effect_a), effect_rows(comparison.effect_b)
    width = max(len(label) for label, _ in rows_a)
    col = max(len(v) for _, v in rows_a + [("", "A")])
    lines.append("effect:")
    lines.append(f"  {'':<{width}}  {'A':>{col}}  B")
    for (label, a), (_, b) in zip(rows_a, rows_b):
        mark = "" if a == b else "   <- changed"
        lines.append(f"  {label:<{width}}  {a:>{col}}  {b}{mark}")
    return lines
