"""Activation memory of a Hugging Face Llama-family model (LlamaForCausalLM, MistralForCausalLM) in training.

Each term was found by probing zerolab.sizing.simulate layer by layer (what autograd saves, what backward allocates) and
is checked against it by tests/test_simulate.py. s = sequence, b = micro-batch, h = hidden, kv = key/value width,
a = heads, f = MLP inner size, v = vocabulary, d = h/a, e = bytes per element (2 for bf16/fp16, 4 for fp32).

One layer keeps, without recomputation:
  RMSNorm (eager torch, twice): its fp32 copy of the input 4sbh, the normalised input before the weight e*sbh and
      the fp32 1/rms per token 4sb -- (4+e) bytes per element, where Megatron counts e;
  the q/k/v input e*sbh; rotary keeps only cos and sin, shared by all layers (2*s*d*e);
  sdpa: query e*sbh, key and value e*sb*kv each (grouped-query attention runs inside the kernel), the output
      e*sbh, which the output projection keeps too (its transpose is already contiguous), and the fp32
      log-sum-exp 4asb. CUDA's flash and memory-efficient kernels keep the same;
  eager: query, key and value repeated to all heads e*sbh each, the fp32 softmax 4as^2b, the probabilities cast
      back e*as^2b (the same tensor at fp32), and the output projection's input e*sbh;
  the MLP input e*sbh and SwiGLU's four s x f tensors (gate, silu(gate), up, their product) 4e*sbf.
Full recomputation keeps each layer's input, e*sbh (and eager's additive causal mask, b*s^2*e, once). Outside the
layers: the final norm as above, the head input e*sbh, the fp32 log-softmax the loss keeps 4sbv, and the token ids
and labels (int64) 16sb.

The peak comes during backward, at the largest of these moments, each the kept total plus ``working``:
  loss: the fp32 gradients of the log-softmax and of the upcast logits, 8sbv;
  output_layer: the log-softmax freed, the logits' gradient e*sbv, the head's weight gradient e*vh and its input
      gradient e*sbh;
  last_layer: the loss and head terms freed, the residual gradient e*sbh, then within the layer the largest of:
      the MLP's down projection (its weight gradient e*hf + its input gradient e*sbf) or SwiGLU's product rule
      (2e*sbf), and for eager the softmax backward (its fp32 input and output gradients 8as^2b and one s x b x h
      gradient, with the MLP's, the second norm's, the probabilities' and V's tensors freed).
  With full recomputation the last layer's moment adds that layer's recomputed tensors (one layer's kept set).
"""
from zerolab.engine.activation_bytes import Activations

ELEMENT_BYTES = {"fp16": 2, "bf16": 2, "fp32": 4}
ATTENTION = ("sdpa", "eager")
RECOMPUTE = ("none", "full")


def hf_activation_memory(model, seq_len, micro_batch, precision="bf16", attention="sdpa", recompute="none"):
    """Peak activation bytes of one GPU running ``model`` (a zerolab.engine.models.Decoder) as HF's Llama code does."""
    if model.mlp != "swiglu" or model.norm != "rmsnorm":
        raise ValueError(f"implementation 'hf' models Llama-family layers (SwiGLU, RMSNorm); {model.name} is "
                         f"{model.mlp}/{model.norm}: use implementation='megatron'")
    if attention not in ATTENTION or recompute not in RECOMPUTE or precision not in ELEMENT_BYTES:
        raise ValueError(f"implementation 'hf' takes attention in {ATTENTION}, recompute in {RECOMPUTE}, "
                         f"precision in {tuple(ELEMENT_BYTES)}; got {attention!r}, {recompute!r}, {precision!r}")
    dims = _Dims(model, seq_len, micro_batch, ELEMENT_BYTES[precision])
    full_layer = hf_layer_terms(dims, attention)
    layer = {"layer_input": dims.e * dims.sbh} if recompute == "full" else full_layer
    outside = _outside(dims)
    moments = {"loss": {"loss_gradients_fp32": 8 * dims.sbv},
               "output_layer": {"freed_log_softmax": -4 * dims.sbv, "logits_gradient": dims.e * dims.sbv,
                                "head_weight_gradient": dims.e * dims.v * dims.h,
                                "head_input_gradient": dims.e * dims.sbh},
               "last_layer": _last_layer(dims, attention, full_layer, outside, recompute)}
    name, working = max(moments.items(), key=lambda item: sum(item[1].values()))
    shared = {"rotary_cos_sin": 2 * seq_len * dims.d * dims.e, "token_ids_and_labels": 16 * dims.sb}
    if attention == "eager" and recompute == "full":  # an input of every checkpointed layer, so kept once
        shared["causal_mask"] = micro_batch * seq_len * seq_len * dims.e
    return Activations(model.layers, layer, shared, outside, working, moment=name)


class _Dims:
    def __init__(self, model, s, b, e):
        self.e, self.h, self.f, self.v, self.a = e, model.hidden, model.ffn, model.vocab, model.heads
        self.d = model.hidden // model.heads
        self.sb = s * b
        self.sbh, self.sbkv, self.sbf, self.sbv = s * b * model.hidden, s * b * model.kv_width, s * b * model.ffn, \
            s * b * model.vocab
        self.as2b = model.heads * s * s * b


def _norm(dims):
    return {"fp32_input": 4 * dims.sbh, "normalised": dims.e * dims.sbh, "inverse_rms": 4 * dims.sb}


def hf_layer_terms(dims, attention):
    """What one decoder layer keeps for backward, by term (see the module docstring)."""
    e = dims.e
    terms = {f"input_norm_{name}": nbytes for name, nbytes in _norm(dims).items()}
    terms["qkv_input"] = e * dims.sbh
    terms["query"] = e * dims.sbh
    if attention == "sdpa":
        terms["key"] = terms["value"] = e * dims.sbkv
        terms["attention_output"] = e * dims.sbh
        terms["logsumexp_fp32"] = 4 * dims.a * dims.sb
    else:
        terms["key_repeated"] = terms["value_repeated"] = e * dims.sbh
        terms["softmax_fp32"] = 4 * dims.as2b
        terms["probabilities"] = 0 if e == 4 else e * dims.as2b
        terms["output_projection_input"] = e * dims.sbh
    terms.update({f"post_norm_{name}": nbytes for name, nbytes in _norm(dims).items()})
    terms["mlp_input"] = e * dims.sbh
    terms["swiglu"] = 4 * e * dims.sbf
    return terms


def _outside(dims):
    terms = {f"final_norm_{name}": nbytes for name, nbytes in _norm(dims).items()}
    terms["head_input"] = dims.e * dims.sbh
    terms["log_softmax_fp32"] = 4 * dims.sbv
    return terms


def _last_layer(dims, attention, full_layer, outside, recompute):
    """The first layer backward meets: its largest moment, relative to the kept total."""
    e = dims.e
    working = {"freed_outside": -sum(outside.values()), "residual_gradient": e * dims.sbh}
    if recompute == "full":  # at fp32 the first norm's fp32 copy is the layer input, kept already
        working["recomputed_layer"] = sum(full_layer.values()) - (full_layer["input_norm_fp32_input"] if e == 4 else 0)
    inner = {"mlp_down_projection": e * dims.h * dims.f + e * dims.sbf, "swiglu_product_rule": 2 * e * dims.sbf}
    if attention == "eager":
        freed = (full_layer["swiglu"] + full_layer["mlp_input"] + full_layer["output_projection_input"]
                 + full_layer["probabilities"] + full_layer["value_repeated"]
                 + sum(nbytes for name, nbytes in full_layer.items() if name.startswith("post_norm_")))
        inner["eager_softmax_backward"] = 8 * dims.as2b + e * dims.sbh - freed
    name = max(inner, key=inner.get)
    working[name] = inner[name]
    return working
