"""zerolab.engine.activations against the paper's closed forms, and zerolab.engine.models against the published parameter counts."""
import pytest

from zerolab.engine.activations import activation_memory, layer_terms
from zerolab.engine.models import PRESETS, from_params, preset

# GPT-3 totals are Table 2.1's names, rounded to two significant figures; Llama totals are the checkpoints' exact counts.
GPT3_TOLERANCE = 0.02


@pytest.mark.parametrize("name", PRESETS)
def test_parameter_count_from_the_architecture_matches_the_published_total(name):
    model = PRESETS[name]
    tolerance = GPT3_TOLERANCE if name.startswith("gpt3") else 0
    assert model.params() == pytest.approx(model.published_params, rel=tolerance, abs=0)


def test_gpt3_175b_layer_is_12_h_squared_plus_13_h():
    """Megatron's count of a GPT layer (Narayanan et al. 2021): 12h^2 + 13h parameters."""
    h = 12288
    assert PRESETS["gpt3-175b"].layer_params() == 12 * h * h + 13 * h


@pytest.mark.parametrize("name", ["gpt3-1.3b", "gpt3-175b"])
@pytest.mark.parametrize("s, b", [(2048, 1), (1024, 4)])
def test_paper_accounting_is_sbh_34_plus_5as_over_h(name, s, b):
    model = PRESETS[name]
    h, a = model.hidden, model.heads
    terms = layer_terms(model, s, b, "fp16", "standard", "paper")
    assert sum(terms.values()) == s * b * h * 34 + 5 * a * s * s * b  # section 4.1
    selective = layer_terms(model, s, b, "fp16", "standard", "paper", recompute="selective")
    assert sum(selective.values()) == 34 * s * b * h  # section 5: the attention core recomputed
    full = activation_memory(model, s, b, "fp16", "standard", "full")
    assert full.layers * full.layer_bytes == 2 * s * b * h * model.layers  # section 4.2: 2sbhL


def test_flash_attention_keeps_no_scores_and_selective_recompute_matches_it():
    model = PRESETS["gpt3-6.7b"]
    short = activation_memory(model, 1024, 1, "bf16", "flash").layer_bytes
    long = activation_memory(model, 4096, 1, "bf16", "flash").layer_bytes
    assert long == pytest.approx(4 * short, rel=1e-9)  # linear in s: no s x s term left
    standard = activation_memory(model, 4096, 1, "bf16", "standard").layer_bytes
    assert long < standard / 2


def test_full_recomputation_counts_one_layer_working_set():
    model = PRESETS["llama2-13b"]
    full = activation_memory(model, 4096, 1, "bf16", "flash", "full")
    none = activation_memory(model, 4096, 1, "bf16", "flash", "none")
    assert sum(full.working.values()) == none.layer_bytes
    assert full.total_bytes < none.total_bytes / 10


def test_micro_batch_scales_linearly():
    model = preset("llama3-8b")
    one = activation_memory(model, 2048, 1).total_bytes
    assert activation_memory(model, 2048, 3).total_bytes == 3 * one


@pytest.mark.parametrize("kwargs, needle", [
    (dict(seq_len=0), "seq_len"), (dict(micro_batch=1.5), "micro_batch"), (dict(precision="int8"), "precision"),
    (dict(recompute="some"), "recompute"), (dict(attention="sparse"), "attention"),
])
def test_bad_arguments_name_the_field(kwargs, needle):
    args = dict(seq_len=1024, micro_batch=1) | kwargs
    with pytest.raises(ValueError, match=needle):
        activation_memory(PRESETS["gpt3-125m"], **args)


def test_unknown_preset_lists_the_choices():
    with pytest.raises(ValueError, match="llama2-13b"):
        preset("llama-13")


@pytest.mark.parametrize("params", [125 * 10**6, 1_300_000_000, 13 * 10**9, 70 * 10**9])
def test_a_bare_parameter_count_gets_a_decoder_of_that_size(params):
    assert from_params(params).params() == pytest.approx(params, rel=0.05)
    assert from_params(params, layers=40, hidden=5120).layers == 40
