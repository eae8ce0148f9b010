"""The error ledger's measurements, for the lessons: full-size simulated activation peaks of real Hugging Face
models (scripts/fit_ledger.py records them in zerolab/sizing/data/fit_ledger.json and docs/fit_ledger.md), and how far
each activation formula of zerolab.engine.activations lands from them, computed now."""
import json
import statistics
from pathlib import Path

from zerolab.engine.activations import HF_ATTENTION, activation_memory
from zerolab.sizing.hf_models import HF_CONFIGS
from zerolab.engine.models import from_hf_config

RECORD = Path(__file__).resolve().parent / "data" / "fit_ledger.json"
IMPLEMENTATIONS = ("hf", "megatron")
MEGATRON_ATTENTION = {hf: megatron for megatron, hf in HF_ATTENTION.items()}  # the same two kernels


def rows():
    """The simulated rows: dicts of model, attention, recompute, seq_len, micro_batch, simulated_bytes, seconds."""
    return json.loads(RECORD.read_text(encoding="utf-8"))["rows"]


def formula_bytes(row, implementation):
    """What ``implementation``'s formula counts for one row (bf16, as the rows were simulated)."""
    model = from_hf_config(HF_CONFIGS[row["model"]], row["model"])
    attention = row["attention"] if implementation == "hf" else MEGATRON_ATTENTION[row["attention"]]
    return activation_memory(model, row["seq_len"], row["micro_batch"], "bf16", attention, row["recompute"],
                             implementation=implementation).total_bytes


def error(row, implementation):
    """formula / simulated - 1."""
    return formula_bytes(row, implementation) / row["simulated_bytes"] - 1


def summary():
    """{implementation: {"rows": how many, "median_abs": the median |error|, "worst": the error largest in size}}."""
    simulated = rows()
    result = {}
    for implementation in IMPLEMENTATIONS:
        errors = [error(row, implementation) for row in simulated]
        result[implementation] = {"rows": len(errors), "median_abs": statistics.median(abs(e) for e in errors),
                                  "worst": max(errors, key=abs)}
    return result
