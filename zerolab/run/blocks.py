"""Real decoder blocks in torch, and the bytes they save for backward, to check zerolab.engine.activations against.

Two block shapes besides the tiny GPT's own ``zerolab.run.model.Block``:

``GPTBlock``
    The block Korthikanti et al. 2022 count (Megatron's GPT): LayerNorm, one QKV projection, explicit attention
    (Q K^T, scale, causal mask, softmax, dropout, attention over V) or a fused SDPA, output projection, dropout,
    LayerNorm, a 4h GeLU MLP, dropout; pre-norm residuals. ``selective=True`` runs the attention core under
    torch.utils.checkpoint: the paper's selective recomputation.
``LlamaBlock``
    RMSNorm (torch's nn.RMSNorm), grouped-query attention through SDPA, a SwiGLU MLP, no dropout, no biases.
    Rotary embeddings are left out: they change which copies of Q and K are kept, not the layout of the rest.

``saved_bytes`` runs a forward pass under ``torch.autograd.graph.saved_tensors_hooks`` and counts every storage
autograd keeps for backward once (views of one storage share it), leaving out the parameters.
"""
import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint

DROPOUT = 0.1


class GPTBlock(nn.Module):
    def __init__(self, model, attention="standard", selective=False):
        super().__init__()
        h = model.hidden
        self.heads, self.attention, self.selective = model.heads, attention, selective
        self.dropout = DROPOUT if model.dropout else 0.0
        self.norm1, self.norm2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, model.ffn), nn.Linear(model.ffn, h)

    def forward(self, x, causal_mask):
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = (t.view(b, s, self.heads, d).transpose(1, 2) for t in self.qkv(self.norm1(x)).split(h, dim=-1))
        if self.attention == "flash":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.selective:  # the paper's selective recomputation: the attention core runs again in backward
            o = checkpoint(self._core, q, k, v, causal_mask, use_reentrant=False)
        else:
            o = self._core(q, k, v, causal_mask)
        x = x + F.dropout(self.proj(o.transpose(1, 2).reshape(b, s, h)), self.dropout, self.training)
        y = self.fc2(F.gelu(self.fc1(self.norm2(x))))
        return x + F.dropout(y, self.dropout, self.training)

    def _core(self, q, k, v, causal_mask):
        scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(q.shape[-1]))
        probs = torch.softmax(scores.masked_fill(causal_mask, float("-inf")), dim=-1)
        return F.dropout(probs, self.dropout, self.training) @ v


class LlamaBlock(nn.Module):
    def __init__(self, model, attention="flash"):
        super().__init__()
        h, f = model.hidden, model.ffn
        self.heads, self.kv_heads = model.heads, model.kv_heads or model.heads
        self.norm1, self.norm2 = nn.RMSNorm(h), nn.RMSNorm(h)
        self.q, self.o = nn.Linear(h, h, bias=False), nn.Linear(h, h, bias=False)
        self.k, self.v = nn.Linear(h, model.kv_width, bias=False), nn.Linear(h, model.kv_width, bias=False)
        self.gate, self.up, self.down = (nn.Linear(h, f, bias=False), nn.Linear(h, f, bias=False),
                                         nn.Linear(f, h, bias=False))

    def forward(self, x, causal_mask=None):
        b, s, h = x.shape
        d = h // self.heads
        y = self.norm1(x)
        q = self.q(y).view(b, s, self.heads, d).transpose(1, 2)
        k = self.k(y).view(b, s, self.kv_heads, d).transpose(1, 2)
        v = self.v(y).view(b, s, self.kv_heads, d).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(o.transpose(1, 2).reshape(b, s, h))
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


def saved_bytes(forward, module, *inputs):
    """Bytes of the distinct storages autograd saves while ``forward(*inputs)`` runs, parameters left out.

    Returns (total, [(nbytes, shape, dtype), ...] in the order they were first saved).
    """
    params = {p.untyped_storage().data_ptr() for p in module.parameters()}
    kept = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params:
            kept.setdefault(storage.data_ptr(), (storage.nbytes(), tuple(tensor.shape), tensor.dtype))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        forward(*inputs)
    return sum(nbytes for nbytes, _, _ in kept.values()), list(kept.values())
