"""Hugging Face configs for the simulation: a preset name, a local config.json, or a hub id (online only).

The presets are the architecture fields of the released config.json files (TinyLlama/TinyLlama-1.1B-intermediate-
step-1431k-3T, meta-llama/Llama-2-{7,13,70}b-hf,
meta-llama/Meta-Llama-3-{8,70}B, mistralai/Mistral-7B-v0.3, openai-community/gpt2); fields that only matter for
generation or tokenisation are left out. No transformers import here: a config is a plain dict.
"""
import json
import os

from zerolab.errors import UserError


def _llama(hidden, ffn, heads, kv_heads, layers, vocab, positions, rope_theta=10000.0):
    return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": hidden,
            "intermediate_size": ffn, "num_attention_heads": heads, "num_key_value_heads": kv_heads,
            "num_hidden_layers": layers, "vocab_size": vocab, "max_position_embeddings": positions,
            "rms_norm_eps": 1e-05, "rope_theta": rope_theta, "hidden_act": "silu", "tie_word_embeddings": False,
            "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0}


HF_CONFIGS = {
    "tinyllama-1.1b": _llama(2048, 5632, 32, 4, 22, 32000, 2048),
    "llama2-7b": _llama(4096, 11008, 32, 32, 32, 32000, 4096),
    "llama2-13b": _llama(5120, 13824, 40, 40, 40, 32000, 4096),
    "llama2-70b": _llama(8192, 28672, 64, 8, 80, 32000, 4096),
    "llama3-8b": _llama(4096, 14336, 32, 8, 32, 128256, 8192, 500000.0),
    "llama3-70b": _llama(8192, 28672, 64, 8, 80, 128256, 8192, 500000.0),
    "mistral-7b": {**_llama(4096, 14336, 32, 8, 32, 32768, 32768, 1000000.0), "model_type": "mistral",
                   "architectures": ["MistralForCausalLM"], "sliding_window": None},
    "gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": 768, "n_head": 12, "n_layer": 12,
             "n_positions": 1024, "vocab_size": 50257, "n_inner": None, "activation_function": "gelu_new",
             "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-05,
             "tie_word_embeddings": True},
}


def load_hf_config(source):
    """(name, config dict) from a preset name, a config.json path (or its folder), or a Hugging Face hub id."""
    text = str(source).strip()
    if text.lower() in HF_CONFIGS:
        return text.lower(), dict(HF_CONFIGS[text.lower()])
    path = os.path.join(text, "config.json") if os.path.isdir(text) else text
    if os.path.isfile(path):
        try:
            with open(path, encoding="utf-8") as handle:
                config = json.load(handle)
        except (OSError, ValueError) as error:
            raise UserError(f"unreadable config: {path} is not a JSON file ({error})") from None
        if not isinstance(config, dict) or "model_type" not in config:
            raise UserError(f"not a Hugging Face config: {path} has no \"model_type\" field")
        return os.path.basename(os.path.dirname(os.path.abspath(path))) or "config", config
    if text.endswith(".json") or os.sep in text and not _looks_like_hub_id(text):
        raise UserError(f"missing file: no config.json at {text}")
    if not _looks_like_hub_id(text):
        raise UserError(f"unknown model {source!r}: use a preset ({', '.join(HF_CONFIGS)}), a config.json path, "
                        "or a hub id such as owner/name")
    return text, _hub_config(text)


def _looks_like_hub_id(text):
    parts = text.split("/")
    return len(parts) == 2 and all(parts) and not text.startswith((".", "/"))


def _hub_config(hub_id):
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
        raise UserError(f"offline: {hub_id} is a hub id and HF_HUB_OFFLINE is set; download its config.json and "
                        "pass its path instead")
    from transformers import AutoConfig
    try:
        return AutoConfig.from_pretrained(hub_id).to_dict()
    except (OSError, ValueError) as error:
        raise UserError(f"unreachable hub id: could not fetch the config of {hub_id} ({type(error).__name__}); "
                        "if this machine is offline, pass a local config.json instead") from None
