"""Decoder shapes from published configs, and their parameter counts computed from the architecture.

Sources: GPT-3 - Brown et al. 2020, "Language Models are Few-Shot Learners", Table 2.1 (layers, d_model, heads;
context 2048; GPT-2 BPE vocabulary of 50257 tokens; learned positions; tied input/output embedding; d_ff = 4 d_model).
The table prints 5140 for the 13B model's d_model and 24 heads for the 1.3B model's 2048; with its d_head of 128
these are 5120 and 16, the values used here.
Llama 2 - Touvron et al. 2023 and the released config.json files (vocab 32000, SwiGLU, RMSNorm, untied output head;
70B uses grouped-query attention with 8 key/value heads). Llama 3 - Meta's released config.json files (vocab 128256,
8 key/value heads).
"""
from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class Decoder:
    """A GPT-style decoder: ``layers`` blocks of attention + MLP between a token embedding and an output head."""

    name: str
    layers: int
    hidden: int
    heads: int
    ffn: int  # inner size of the MLP (4 x hidden for GPT; 11008 for Llama 2 7B)
    vocab: int
    kv_heads: int = 0  # key/value heads (grouped-query attention); 0 = as many as heads
    mlp: str = "gelu"  # "gelu": two matrices; "swiglu": three (gate, up, down)
    norm: str = "layernorm"  # "layernorm" has weight and bias; "rmsnorm" a weight only
    bias: bool = True  # biases on every linear layer (GPT-3), none (Llama)
    dropout: bool = True  # GPT-3 trains with dropout; Llama without
    positions: int = 0  # learned position embeddings (GPT-3: 2048); 0 = rotary, no parameters
    tied_embeddings: bool = True  # the output head reuses the token embedding
    published_params: int = 0  # the total the model's authors give, for the test against params()

    @property
    def kv_width(self):
        """Width of the key (and of the value) projection: hidden x kv_heads / heads."""
        return self.hidden * (self.kv_heads or self.heads) // self.heads

    def layer_params(self):
        h, f, kv = self.hidden, self.ffn, self.kv_width
        bias = self.bias
        attention = h * (h + 2 * kv) + h * h + (h + 2 * kv + h if bias else 0)
        matrices = 2 if self.mlp == "gelu" else 3
        mlp = matrices * h * f + ((f if matrices == 2 else 2 * f) + h if bias else 0)
        norms = 2 * (2 * h if self.norm == "layernorm" else h)
        return attention + mlp + norms

    def params(self):
        """Parameters computed from the architecture (each shared tensor once)."""
        embedding = self.vocab * self.hidden + self.positions * self.hidden
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        final_norm = 2 * self.hidden if self.norm == "layernorm" else self.hidden
        return self.layers * self.layer_params() + embedding + head + final_norm

    def parameter_shapes(self):
        """(name, shape) of every parameter in the order the model registers them, each shared tensor once: Hugging
        Face's Llama names for SwiGLU models, Megatron's GPT names otherwise. The names matter to DeepSpeed's Muon,
        which steps the matrices whose names hold neither "embed" nor "lm_head" (zerolab.engine.muon)."""
        h, f, kv, v = self.hidden, self.ffn, self.kv_width, self.vocab
        llama = self.mlp == "swiglu"

        def linear(name, out_features, in_features):
            return [(f"{name}.weight", (out_features, in_features))] + ([(f"{name}.bias", (out_features,))]
                                                                         if self.bias else [])

        def norm(name):
            return [(f"{name}.weight", (h,))] + ([(f"{name}.bias", (h,))] if self.norm == "layernorm" else [])

        if llama:
            shapes = [("model.embed_tokens.weight", (v, h))]
        else:
            shapes = [("embedding.word_embeddings.weight", (v, h))]
            if self.positions:
                shapes.append(("embedding.position_embeddings.weight", (self.positions, h)))
        for i in range(self.layers):
            if llama:
                at = f"model.layers.{i}"
                shapes += (linear(f"{at}.self_attn.q_proj", h, h) + linear(f"{at}.self_attn.k_proj", kv, h)
                           + linear(f"{at}.self_attn.v_proj", kv, h) + linear(f"{at}.self_attn.o_proj", h, h)
                           + linear(f"{at}.mlp.gate_proj", f, h) + linear(f"{at}.mlp.up_proj", f, h)
                           + linear(f"{at}.mlp.down_proj", h, f)
                           + norm(f"{at}.input_layernorm") + norm(f"{at}.post_attention_layernorm"))
            else:
                at = f"layers.{i}"
                shapes += (norm(f"{at}.input_layernorm") + linear(f"{at}.self_attention.query_key_value", h + 2 * kv, h)
                           + linear(f"{at}.self_attention.dense", h, h) + norm(f"{at}.post_attention_layernorm")
                           + linear(f"{at}.mlp.dense_h_to_4h", f, h) + linear(f"{at}.mlp.dense_4h_to_h", h, f))
        shapes += norm("model.norm" if llama else "final_layernorm")
        if not self.tied_embeddings:
            shapes.append(("lm_head.weight" if llama else "output_layer.weight", (v, h)))
        return shapes

    def largest_layer_params(self):
        """The biggest single weight: the embedding (or an MLP matrix, if that were larger)."""
        return max(self.vocab * self.hidden, self.hidden * self.ffn)

    def as_dict(self):
        return {**asdict(self), "params": self.params()}


def _gpt3(name, layers, hidden, heads, published):
    return Decoder(name, layers, hidden, heads, 4 * hidden, 50257, positions=2048, published_params=published)


def _llama(name, layers, hidden, heads, kv_heads, ffn, vocab, published):
    return Decoder(name, layers, hidden, heads, ffn, vocab, kv_heads=kv_heads, mlp="swiglu", norm="rmsnorm",
                   bias=False, dropout=False, tied_embeddings=False, published_params=published)


PRESETS = {model.name: model for model in (
    # GPT-3 totals are the paper's rounded names (Table 2.1); Llama totals are the released checkpoints' exact counts.
    _gpt3("gpt3-125m", 12, 768, 12, 125_000_000),
    _gpt3("gpt3-350m", 24, 1024, 16, 350_000_000),
    _gpt3("gpt3-760m", 24, 1536, 16, 760_000_000),
    _gpt3("gpt3-1.3b", 24, 2048, 16, 1_300_000_000),
    _gpt3("gpt3-2.7b", 32, 2560, 32, 2_700_000_000),
    _gpt3("gpt3-6.7b", 32, 4096, 32, 6_700_000_000),
    _gpt3("gpt3-13b", 40, 5120, 40, 13_000_000_000),
    _gpt3("gpt3-175b", 96, 12288, 96, 175_000_000_000),
    _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 6_738_415_616),
    _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 13_015_864_320),
    _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 68_976_648_192),
    _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8_030_261_248),
    _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 70_553_706_496),
)}


def preset(name):
    """A preset by name ('llama2-13b', 'gpt3-175b', ...); ValueError naming the choices otherwise."""
    key = str(name).strip().lower()
    if key not in PRESETS:
        raise ValueError(f"unknown model {name!r}: use one of {', '.join(PRESETS)}")
    return PRESETS[key]


def from_params(params, layers=None, hidden=None, heads=None, vocab=None):
    """A GPT-3-shaped decoder of about ``params`` parameters, for --params without a preset.

    Unless given, hidden follows the GPT-3 family's hidden / layers ~ 128 (12 L h^2 ~ params), rounded to a multiple
    of 128, heads of 128 dimensions, and the GPT-2 vocabulary; layers then fill the remaining parameters.
    """
    vocab = vocab or 50257
    if hidden is None:
        if layers:
            hidden = (params / (12 * layers)) ** 0.5
        else:
            hidden = (128 * params / 12) ** (1 / 3)
        hidden = max(128, int(round(hidden / 128)) * 128)
    heads = heads or max(1, hidden // 128)
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    base = Decoder("custom", 1, hidden, heads, 4 * hidden, vocab, positions=2048)
    if layers is None:
        layers = max(1, round((params - (base.params() - base.layer_params())) / base.layer_params()))
    return replace(base, name=f"custom-{layers}x{hidden}", layers=layers)


def from_hf_config(config, name=None):
    """The Decoder of a Hugging Face config.json (a dict): Llama-family (llama, mistral) or GPT-2 fields."""
    kind = config.get("model_type")
    name = name or config.get("_name_or_path") or kind or "hf"
    if kind == "gpt2":
        hidden = config["n_embd"]
        return Decoder(name, config["n_layer"], hidden, config["n_head"], config.get("n_inner") or 4 * hidden,
                       config["vocab_size"], positions=config["n_positions"],
                       tied_embeddings=config.get("tie_word_embeddings", True))
    if kind not in ("llama", "mistral"):
        raise ValueError(f"unsupported model_type {kind!r}: from_hf_config reads llama, mistral and gpt2 configs")
    heads = config["num_attention_heads"]
    if config.get("head_dim") not in (None, config["hidden_size"] // heads):
        raise ValueError("unsupported config: head_dim differs from hidden_size / num_attention_heads")
    if config.get("attention_bias") or config.get("mlp_bias"):
        raise ValueError("unsupported config: biased Llama layers (attention_bias/mlp_bias) are not modelled")
    return Decoder(name, config["num_hidden_layers"], config["hidden_size"], heads, config["intermediate_size"],
                   config["vocab_size"], kv_heads=config.get("num_key_value_heads") or heads, mlp="swiglu",
                   norm="rmsnorm", bias=False, dropout=False,
                   tied_embeddings=config.get("tie_word_embeddings", False))
