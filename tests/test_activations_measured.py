"""zerolab.engine.activations against the bytes real torch blocks save for backward (saved_tensors_hooks, CPU).

Three shapes: the tiny GPT's own block (zerolab.run.model), the paper's GPT block (explicit attention and dropout,
or a fused SDPA), and a Llama-style block (RMSNorm, grouped-query SDPA, SwiGLU); each with no recomputation
and under torch.utils.checkpoint (full recomputation), the paper's block also with selective recomputation.
Tolerances: the real_block accounting must match the measurement within 1% (it models every tensor the block
keeps); the paper's accounting within 35% (run `python tests/test_activations_measured.py` for the table of
ratios, and the activations module docstring for what makes them differ).
"""
import functools

import pytest
import torch
from torch.utils.checkpoint import checkpoint

from zerolab.engine.activations import activation_memory
from zerolab.engine.models import Decoder
from zerolab.run.blocks import GPTBlock, LlamaBlock, saved_bytes
from zerolab.run.model import Block, ModelSpec

REAL_TOLERANCE = 0.01
PAPER_TOLERANCE = 0.35
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
TINY = ModelSpec()

# name: (Decoder, attention, precision, seq_len, micro_batch, build(decoder) -> block)
SHAPES = {
    "tiny_gpt": (Decoder("tiny", TINY.layers, TINY.width, TINY.heads, 4 * TINY.width, TINY.vocab, dropout=False),
                 "torch_mha", "fp32", TINY.seq_len, 4, lambda m, selective: Block(TINY)),
    "gpt_standard": (Decoder("gpt", 2, 128, 4, 512, 1000), "standard", "bf16", 64, 2,
                     lambda m, selective: GPTBlock(m, "standard", selective)),
    "gpt_flash": (Decoder("gpt", 2, 128, 4, 512, 1000), "flash", "bf16", 64, 2, lambda m, selective: GPTBlock(m, "flash")),
    "llama_gqa": (Decoder("llama", 2, 128, 8, 344, 1000, kv_heads=2, mlp="swiglu", norm="rmsnorm", bias=False,
                          dropout=False, tied_embeddings=False), "flash", "bf16", 64, 2,
                  lambda m, selective: LlamaBlock(m)),
}
CASES = [(shape, recompute) for shape in SHAPES for recompute in ("none", "full")] + [("gpt_standard", "selective")]


@functools.cache
def measure(shape, recompute):
    """Bytes the stacked blocks of ``shape`` save for backward in one forward pass."""
    model, attention, precision, seq_len, batch, build = SHAPES[shape]
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(build(model, recompute == "selective") for _ in range(model.layers))
    blocks = blocks.to(DTYPES[precision]).train()
    x = torch.randn(batch, seq_len, model.hidden, dtype=DTYPES[precision], requires_grad=True)
    mask = None
    if attention != "flash":
        mask = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), diagonal=1)

    def forward(x):
        for block in blocks:
            x = checkpoint(block, x, mask, use_reentrant=False) if recompute == "full" else block(x, mask)
        return x

    total, _ = saved_bytes(forward, blocks, x)
    return total


def predicted(shape, recompute, accounting):
    model, attention, precision, seq_len, batch, _ = SHAPES[shape]
    if accounting == "paper" and attention == "torch_mha":
        attention = "flash"  # the paper knows no torch_mha; its kernel keeps no scores
    return activation_memory(model, seq_len, batch, precision, attention, recompute, accounting).blocks_bytes


@pytest.mark.parametrize("shape, recompute", CASES)
def test_real_block_accounting_matches_the_measurement(shape, recompute):
    measured = measure(shape, recompute)
    assert predicted(shape, recompute, "real_block") == pytest.approx(measured, rel=REAL_TOLERANCE)


@pytest.mark.parametrize("shape, recompute", CASES)
def test_paper_accounting_is_within_its_stated_tolerance(shape, recompute):
    measured = measure(shape, recompute)
    assert predicted(shape, recompute, "paper") == pytest.approx(measured, rel=PAPER_TOLERANCE)


def test_the_measurement_sees_recomputation():
    """Checkpointing must shrink what is saved: the hooks see the checkpointed region (or the test means nothing)."""
    for shape in SHAPES:
        assert measure(shape, "full") * 4 < measure(shape, "none")
    assert measure("gpt_standard", "selective") < measure("gpt_standard", "none")


if __name__ == "__main__":
    print(f"{'shape':<13} {'recompute':<10} {'paper':>10} {'real_block':>10} {'measured':>10} "
          f"{'paper/meas':>10} {'real/meas':>9}")
    for shape, recompute in CASES:
        measured = measure(shape, recompute)
        paper, real = predicted(shape, recompute, "paper"), predicted(shape, recompute, "real_block")
        print(f"{shape:<13} {recompute:<10} {paper:>10,} {real:>10,} {measured:>10,} {paper / measured:>10.3f} "
              f"{real / measured:>9.3f}")
