"""Activation memory per GPU of a GPT-style decoder: what the forward pass keeps for the backward pass.

Every GPU of a ZeRO (data-parallel) run runs the whole model on its own micro-batch, so no term is divided by a
tensor- or pipeline-parallel size. Sizes: s = sequence length, b = micro-batch, h = hidden, a = heads,
f = MLP inner size, v = vocabulary, L = layers.

``paper`` accounting: Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
section 4.1, with 16-bit activations (2 bytes) and 1-byte dropout masks. One layer keeps sbh(34 + 5as/h) bytes:
  attention 11sbh + 5as^2b: the QKV input 2sbh, Q and K 4sbh, the softmax output 2as^2b, its dropout mask as^2b,
            the dropout output 2as^2b, V 2sbh, the output projection's input 2sbh, its dropout mask sbh;
  MLP 19sbh: the first linear's input 2sbh, the GeLU input 8sbh, the GeLU output 8sbh, the dropout mask sbh;
  the two LayerNorms' inputs 4sbh.
Selective recomputation (section 5) recomputes the attention core (scores, softmax, dropout, attention over V)
and keeps 34sbh; full recomputation keeps each layer's input, 2sbh. Outside the layers (section 4.3) zerolab
counts the embedding dropout mask sbh, the inputs of the final norm and of the output layer 2sbh each, and the
fp32 logits the loss keeps, 4sbv.
zerolab extends the same counting, term by term, where the paper's GPT has no such part: other precisions
(fp32 doubles every 2-byte term), no dropout (the masks go, and the softmax output is what attention over V
keeps), grouped-query attention (K and V are s x b x kv_width), a SwiGLU MLP (four s x b x f tensors: gate,
up, silu(gate), their product), and a fused/flash attention, which keeps no s x s scores, only its per-row
softmax statistics (4asb bytes, fp32). Full recomputation also needs one layer's activations while that layer's
backward runs (``working``), which the paper's 2sbhL leaves out; the budget counts it.

``real_block`` accounting: what the torch blocks of zerolab.run keep on a CPU, measured byte for byte by
tests/test_activations_measured.py. Where they keep something the paper does not (or less):
  - LayerNorm also keeps its mean and 1/std per token (2 values, in the activation dtype on CPU);
  - torch's nn.RMSNorm keeps an fp32 copy of its input and the fp32 normalised input (8 bytes per element,
    at any precision) plus 1/std per token in fp32, instead of the paper's 16-bit input;
  - dropout on a CPU keeps its mask in the activation dtype (2 or 4 bytes), not CUDA's 1-byte mask;
  - nn.MultiheadAttention (the tiny GPT, attention="torch_mha") turns the boolean causal mask into a float
    s x s mask on every call and keeps it: s^2 per layer, even though the kernel itself keeps no scores;
  - explicit attention keeps the boolean causal mask, s^2 bytes, once for all layers (``shared``), and so does
    torch.utils.checkpoint when the mask is an input of every checkpointed layer.
"""
from zerolab.engine.activation_bytes import Activations
from zerolab.engine.activations_hf import hf_activation_memory

RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("standard", "flash", "torch_mha")
ACCOUNTINGS = ("paper", "real_block")
ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
IMPLEMENTATIONS = ("megatron", "hf")
HF_ATTENTION = {"flash": "sdpa", "standard": "eager"}  # the megatron names of the same two kernels


def activation_memory(model, seq_len, micro_batch, precision="bf16", attention="flash", recompute="none",
                      accounting="paper", implementation="megatron"):
    """Activation bytes per GPU for ``model`` (a zerolab.engine.models.Decoder) at this sequence length and micro-batch.

    ``implementation``: "megatron" counts as Korthikanti et al. do (with ``accounting`` "paper" or "real_block");
    "hf" follows Hugging Face's Llama code, checked against zerolab.sizing.simulate (zerolab.engine.activations_hf), where
    attention is "sdpa" or "eager" ("flash" and "standard" name the same two) and recompute "none" or "full".
    """
    if implementation == "hf":
        _check(seq_len, micro_batch, precision, "flash", "none", accounting)
        attention = HF_ATTENTION.get(attention, attention)
        return hf_activation_memory(model, seq_len, micro_batch, precision, attention, recompute)
    if implementation != "megatron":
        raise ValueError(f"implementation must be one of {', '.join(IMPLEMENTATIONS)}, got {implementation!r}")
    _check(seq_len, micro_batch, precision, attention, recompute, accounting)
    args = (model, seq_len, micro_batch, precision, attention, accounting)
    layer = layer_terms(*args, recompute=recompute)
    working = {}
    if recompute == "full":
        working = {f"recompute_{name}": nbytes for name, nbytes in layer_terms(*args, recompute="none").items()}
    elif recompute == "selective":
        full, kept = layer_terms(*args, recompute="none"), layer
        working = {f"recompute_{name}": nbytes for name, nbytes in full.items() if name not in kept}
    return Activations(model.layers, layer, _shared(seq_len, attention, recompute, accounting),
                       _outside(model, seq_len, micro_batch, precision, accounting), working)


def layer_terms(model, seq_len, micro_batch, precision="bf16", attention="flash", accounting="paper",
                recompute="none"):
    """Bytes one decoder layer keeps for backward, by named term (see the module docstring)."""
    s, b, h, a, f, kv = seq_len, micro_batch, model.hidden, model.heads, model.ffn, model.kv_width
    e = ELEMENT_BYTES[precision]
    real = accounting == "real_block"
    mask = e if real else 1
    sbh = s * b * h
    if recompute == "full":
        return {"layer_input": sbh * e}
    t = {}
    if real and model.norm == "rmsnorm":
        t["norm_inputs_fp32"] = 2 * (8 * sbh + 4 * s * b)
    else:
        t["norm_inputs"] = 2 * sbh * e
        if real:
            t["norm_statistics"] = 2 * 2 * s * b * e
    t["qkv_input"] = sbh * e
    t["query_key"] = (sbh + s * b * kv) * e
    t["value"] = s * b * kv * e
    if recompute == "none":  # the attention core, which selective recomputation recomputes instead
        if attention == "standard":
            t["softmax_output"] = a * s * s * b * e
            if model.dropout:
                t["attention_dropout_mask"] = a * s * s * b * mask
                t["attention_dropout_output"] = a * s * s * b * e
        else:
            t["flash_softmax_statistics"] = 4 * a * s * b
    if real and attention == "torch_mha":
        t["float_causal_mask"] = s * s * e
    t["projection_input"] = sbh * e
    if model.dropout:
        t["projection_dropout_mask"] = sbh * mask
    t["mlp_input"] = sbh * e
    if model.mlp == "gelu":
        t["gelu_input"] = s * b * f * e
        t["gelu_output"] = s * b * f * e
    else:
        t["swiglu_tensors"] = 4 * s * b * f * e
    if model.dropout:
        t["mlp_dropout_mask"] = sbh * mask
    return t


def _shared(seq_len, attention, recompute, accounting):
    """The boolean causal mask, kept once: by explicit attention, or as an input of every checkpointed layer."""
    if accounting == "real_block" and (attention == "standard" or (attention == "torch_mha" and recompute == "full")):
        return {"causal_mask": seq_len * seq_len}
    return {}


def _outside(model, s, b, precision, accounting):
    e = ELEMENT_BYTES[precision]
    sbh = s * b * model.hidden
    terms = {}
    if model.dropout:
        terms["embedding_dropout_mask"] = sbh * (e if accounting == "real_block" else 1)
    terms["final_norm_input"] = sbh * e
    terms["head_input"] = sbh * e
    terms["logits_fp32"] = 4 * s * b * model.vocab
    return terms


def _check(seq_len, micro_batch, precision, attention, recompute, accounting):
    for name, value in (("seq_len", seq_len), ("micro_batch", micro_batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a whole number >= 1, got {value!r}")
    for name, value, allowed in (("precision", precision, tuple(ELEMENT_BYTES)), ("attention", attention, ATTENTION),
                                 ("recompute", recompute, RECOMPUTE), ("accounting", accounting, ACCOUNTINGS)):
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
