"""Muon in `zerolab fit`: each link from a preset's shapes to a ranked row is checked against the library it stands for.

- zerolab.engine.models.Decoder.parameter_shapes against transformers' LlamaForCausalLM (built on the meta device),
  and the parameters Muon steps against DeepSpeed's own tagging (deepspeed.set_optimizer_flags) on that model;
- the optimizer bytes of the busiest rank against zerolab.engine.muon.rank_bytes of every rank (which
  tests/test_muon_measured.py checks against real DeepSpeed ranks);
- Newton-Schulz FLOPs against torch's FlopCounterMode on DeepSpeed's muon_update itself;
- the rows: Muon at stages 1-2 without offload, the Adam rows those of an Adam-only fit, each Muon row's step time
  its Adam twin's plus the Newton-Schulz FLOPs at the MFU, and every emitted config accepted by `zerolab check`.
"""
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from zerolab.config import check_config
from zerolab.engine import models, muon, zero_terms
from zerolab.engine.units import GB
from zerolab.sizing import gpus, step_time
from zerolab.sizing.fit import ds_config, fit

os.environ.setdefault("DS_ACCELERATOR", "cpu")
SMALL_LLAMAS = [  # (layers, hidden, heads, kv_heads, ffn, vocab, tied): grouped-query attention, tied and untied
    (2, 64, 4, 2, 172, 1000, False), (3, 96, 6, 6, 256, 512, True)]


def _hf_llama(layers, hidden, heads, kv_heads, ffn, vocab, tied):
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=ffn,
                                      num_hidden_layers=layers, num_attention_heads=heads,
                                      num_key_value_heads=kv_heads, tie_word_embeddings=tied)
    with torch.device("meta"):
        return transformers.LlamaForCausalLM(config)


def _decoder(layers, hidden, heads, kv_heads, ffn, vocab, tied):
    return models.Decoder("small", layers, hidden, heads, ffn, vocab, kv_heads=kv_heads, mlp="swiglu", norm="rmsnorm",
                          bias=False, dropout=False, tied_embeddings=tied)


def _deepspeed_tags(model):
    from deepspeed import set_optimizer_flags
    from deepspeed.runtime.config import MUON_OPTIMIZER

    set_optimizer_flags(SimpleNamespace(optimizer_name=MUON_OPTIMIZER, optimizer_params={}), model)
    return [(name, tuple(p.shape), p.use_muon) for name, p in model.named_parameters()]


@pytest.mark.parametrize("shape", SMALL_LLAMAS)
def test_a_llamas_shapes_and_muons_choice_are_transformers_and_deepspeeds(shape):
    real = _deepspeed_tags(_hf_llama(*shape))
    ours = [(name, tuple(dims), muon.steps_with_muon(name, dims)) for name, dims in _decoder(*shape).parameter_shapes()]
    assert ours == real
    assert sum(math.prod(dims) for _, dims, _ in real) == _decoder(*shape).params()


def test_every_presets_shapes_add_up_to_its_parameters():
    for name in models.PRESETS:
        model = models.preset(name)
        assert sum(math.prod(dims) for _, dims in model.parameter_shapes()) == model.params(), name


@pytest.mark.parametrize("world_size", [2, 3, 8])
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_the_busiest_ranks_optimizer_bytes_are_the_largest_of_every_ranks(stage, world_size):
    model = _decoder(*SMALL_LLAMAS[0])
    real = _deepspeed_tags(_hf_llama(*SMALL_LLAMAS[0]))
    shapes, tagged = [dims for _, dims, _ in real], [use for _, _, use in real]
    every = [muon.rank_bytes(shapes, tagged, stage, world_size, rank) for rank in range(world_size)]
    busiest = max(every, key=lambda held: sum(held.values()))
    terms = zero_terms.muon_states(model, stage, world_size)
    assert terms == {"master_weights": busiest["master_weights"], "optimizer_states": busiest["adam_moments"],
                     "muon_momentum": busiest["momentum"]}
    states = zero_terms.model_states(model, stage, world_size, optimizer="muon")
    for peak in (states.backward, states.step):
        assert {name: peak[name] for name in terms} == terms


@pytest.mark.parametrize("shape", [(64, 64), (48, 160), (160, 48), (32, 100), (8, 24)])
def test_newton_schulz_flops_are_what_deepspeeds_muon_update_multiplies(shape):
    """Square matrices take the standard quintic iteration, others the Gram one with its restart."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    torch._dynamo.config.disable = True  # count the eager kernels, not a compiled graph
    from deepspeed.runtime.zero.muon.original_muon import muon_update

    with FlopCounterMode(display=False) as counter:
        muon_update(torch.randn(*shape), torch.zeros(*shape))
    assert counter.get_total_flops() == muon.newton_schulz_flops(shape)


def test_the_busiest_rank_orthogonalizes_every_matrix_its_partition_touches():
    shapes = [(96, 96), (256, 96), (96, 256), (1000, 96)]
    tagged = [True, True, True, False]
    for world in (1, 2, 5):
        muon_sizes = [math.prod(s) for s in muon.muon_order([s for s, t in zip(shapes, tagged) if t])]
        ordered = muon.muon_order([s for s, t in zip(shapes, tagged) if t])
        size = math.ceil(sum(muon_sizes) / (2 * world)) * 2  # flat_partition's padded size (alignment 2)
        busiest = 0
        for rank in range(world):
            offset, flops = 0, 0
            for dims, numel in zip(ordered, muon_sizes):
                if offset < (rank + 1) * size and offset + numel > rank * size:
                    flops += muon.newton_schulz_flops(dims)
                offset += numel
            busiest = max(busiest, flops)
        assert muon.newton_schulz_rank_flops(shapes, tagged, world) == busiest


def test_muon_rows_are_stages_1_and_2_ranked_with_adam_and_pay_for_newton_schulz():
    model = models.preset("llama2-7b")
    only_adam = fit(model, 4096, 80 * GB, gpus_per_node=8, implementation="hf")
    both = fit(model, 4096, 80 * GB, gpus_per_node=8, implementation="hf", optimizers=("adamw", "muon"))
    muon_rows = [o for o in both.rows + both.rejected if o.optimizer == "muon"]
    assert {(o.stage, o.offload_optimizer, o.offload_param) for o in muon_rows} == {(1, "none", "none"),
                                                                                   (2, "none", "none")}
    key = lambda o: (o.stage, o.offload_optimizer, o.offload_param, o.recompute, o.micro_batch)  # noqa: E731
    assert sorted(map(key, (o for o in both.rows if o.optimizer == "adamw"))) == sorted(map(key, only_adam.rows))
    speeds = [o.time.tokens_per_s for o in both.rows]
    assert speeds == sorted(speeds, reverse=True)
    shapes = model.parameter_shapes()
    flops = muon.newton_schulz_rank_flops([dims for _, dims in shapes],
                                          [muon.steps_with_muon(name, dims) for name, dims in shapes], 8)
    h100 = gpus.preset(gpus.DEFAULT_FOR_TIME)
    for option in (o for o in both.rows if o.optimizer == "muon"):
        twin = step_time.step_time(model.params(), option.stage, 8, 1, option.micro_batch, 4096, h100,
                                   option.recompute)
        assert option.time.optimizer_s == pytest.approx(flops / (h100.bf16_flops * step_time.MFU), rel=1e-12)
        assert option.time.total_s == pytest.approx(twin.total_s + option.time.optimizer_s, rel=1e-12)
        adam = next(o for o in both.rows + both.rejected if o.optimizer == "adamw" and
                    (o.stage, o.offload_optimizer, o.recompute) == (option.stage, "none", option.recompute))
        assert option.budget.states.step_bytes < adam.budget.states.step_bytes  # 2 bytes of momentum, not 8
        config = ds_config(option, 8)
        assert config["optimizer"] == {"type": "Muon", "params": {}}
        report = check_config(config, world_size=8)
        assert report.valid and not report.warnings, report.as_dict()


def test_cli_optimizer_both_shows_the_column_and_the_trade_off():
    args = (sys.executable, "-m", "zerolab", "fit", "--model", "llama2-7b", "--seq-len", "4096", "--gpu", "h100-80gb",
            "--gpus-per-node", "8")
    both = subprocess.run([*args, "--optimizer", "both"], capture_output=True, text=True, timeout=120)
    assert both.returncode == 0, both.stderr
    header = both.stdout.splitlines()[3].split()
    assert header[4] == "optimizer"
    assert {line.split()[3] for line in both.stdout.splitlines() if line[:3].strip().isdigit()} == {"adamw", "muon"}
    trade_off = next(line for line in both.stdout.splitlines() if line.startswith("  muon:"))
    assert "2 bytes" in trade_off and "8 bytes" in trade_off and "TFLOP per step" in trade_off
    fp16 = subprocess.run([*args, "--optimizer", "muon", "--precision", "fp16"], capture_output=True, text=True,
                          timeout=120)
    assert fp16.returncode == 2 and "--optimizer muon needs --precision bf16 or fp32" in fp16.stderr
    assert "Traceback" not in fp16.stderr
    bf16_only = subprocess.run([*args, "--optimizer", "muon", "--master", "bf16"], capture_output=True, text=True,
                               timeout=120)
    assert bf16_only.returncode == 2 and "Muon is modelled with fp32 master weights" in bf16_only.stderr
    assert "Nothing fits" not in bf16_only.stdout and "Traceback" not in bf16_only.stderr
