"""A tiny GPT in plain torch, and the synthetic tokens it learns from (no downloads).

Small on purpose: a real DeepSpeed engine trains it on CPU ranks in well under a second per step, yet it has
the parts that matter for ZeRO (embeddings, attention and MLP blocks, a tied-free output head), so every
partition, gradient bucket and optimizer state is a real tensor of a known size.
"""
from dataclasses import asdict, dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class ModelSpec:
    layers: int = 2
    width: int = 64
    heads: int = 4
    vocab: int = 128
    seq_len: int = 32

    def as_dict(self):
        return asdict(self)


class Block(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.norm1 = nn.LayerNorm(spec.width)
        self.attn = nn.MultiheadAttention(spec.width, spec.heads, batch_first=True)
        self.norm2 = nn.LayerNorm(spec.width)
        self.mlp = nn.Sequential(nn.Linear(spec.width, 4 * spec.width), nn.GELU(), nn.Linear(4 * spec.width, spec.width))

    def forward(self, x, causal_mask):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=causal_mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TinyGPT(nn.Module):
    def __init__(self, spec=ModelSpec()):
        super().__init__()
        self.spec = spec
        self.tokens = nn.Embedding(spec.vocab, spec.width)
        self.positions = nn.Embedding(spec.seq_len, spec.width)
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.layers))
        self.norm = nn.LayerNorm(spec.width)
        self.head = nn.Linear(spec.width, spec.vocab, bias=False)

    def forward(self, tokens, targets):
        length = tokens.shape[1]
        x = self.tokens(tokens) + self.positions(torch.arange(length, device=tokens.device))
        mask = torch.triu(torch.ones(length, length, dtype=torch.bool, device=tokens.device), diagonal=1)
        for block in self.blocks:
            x = block(x, mask)
        logits = self.head(self.norm(x))
        return nn.functional.cross_entropy(logits.float().flatten(0, 1), targets.flatten())


def count_params(module):
    """Distinct parameters (a shared one once, as DeepSpeed's estimators count); works on the meta device too."""
    return sum({id(p): p.numel() for p in module.parameters()}.values())


def largest_layer_params(module):
    """The biggest single module's own parameters (what DeepSpeed's ZeRO-3 estimator calls largest_layer)."""
    return max(sum(p.numel() for p in m.parameters(recurse=False)) for m in module.modules())


def muon_layout(module):
    """[(shape, whether DeepSpeed's Muon steps it)] for each parameter, in the module's order
    (zerolab.engine.muon.steps_with_muon: the rule deepspeed.initialize tags by); works on the meta device too."""
    from zerolab.engine.muon import steps_with_muon

    return [(tuple(p.shape), steps_with_muon(name, p.shape)) for name, p in module.named_parameters()]


def synthetic_batch(spec, batch_size, step, rank):
    """Token sequences that count upwards from a random start: easy to learn, so the loss falls in a few steps.

    Every (step, rank) pair gets its own batch, as a data-parallel sampler would give each rank its own shard.
    """
    generator = torch.Generator().manual_seed(1000 * step + rank)
    start = torch.randint(0, spec.vocab, (batch_size, 1), generator=generator)
    sequence = (start + torch.arange(spec.seq_len + 1)) % spec.vocab
    return sequence[:, :-1], sequence[:, 1:]
