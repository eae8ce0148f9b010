"""Building a Hugging Face model on every rank, with and without ``deepspeed.zero.Init`` (lesson 10).

``compare()`` starts 2 CPU ranks (zerolab.run.launch, so an identical job comes from $ZEROLAB_RUN_CACHE when it is
set). Each rank (``python -m zerolab.run.load JOB.json``) builds the same Llama from a config (transformers, no
download, fp32) twice: plainly, as ``from_pretrained`` does on every rank when nothing tells it about ZeRO-3, and
inside ``deepspeed.zero.Init`` with a ZeRO-3 config, which partitions each parameter as its module is built. For
each way the rank reports:

- "held": the bytes of parameter storage it keeps (each parameter's tensor, or its ZeRO-3 shard ``ds_tensor``);
- "grew": how much its resident memory grew while building (psutil), after glibc returned its free heap to the
  system (``malloc_trim``), so that what a previous build freed does not hide the next one's growth.

The model class is imported before ``zero.Init`` starts: inside it, transformers' lazy import of ``torch._dynamo``
fails in DeepSpeed 0.19.8 (a signature check of the tensor constructors zero.Init replaces).
"""
from zerolab.run.worker import emit, serve, start_cpu_rank

RANKS = 2
MODES = ("every rank builds the whole model", "zero.Init")
# A small Llama with real widths where it matters for the lesson: a 32,000-token vocabulary, so the embedding and
# the output head are the largest layers, as in Llama-2.
MODEL = {"vocab_size": 32000, "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 2,
         "num_attention_heads": 8, "num_key_value_heads": 8, "tie_word_embeddings": False}


def job(model=None):
    return {"model": dict(model or MODEL), "device": "cpu",
            "config": {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 3}}}


def compare(model=None, progress=True):
    """[per rank] {mode: {"held": bytes, "grew": bytes, "params": elements, "largest": elements}} of a real run on
    2 CPU ranks."""
    from zerolab.run.launch import launch

    return launch(job(model), RANKS, timeout=300, progress=progress, worker="zerolab.run.load")


def table(results, rank=0):
    from zerolab.base.i18n import tr
    from zerolab.engine.units import format_bytes

    rows = [[tr("how the model is built"), tr("parameter bytes held"), tr("resident memory grew by")]]
    for mode, found in results[rank].items():
        rows.append([tr(mode), format_bytes(found["held"], "MB"), format_bytes(found["grew"], "MB")])
    from zerolab.run.report import aligned

    return aligned(rows)


def main(job_path):
    serve(job_path, run_job)


def run_job(job, rank):
    import gc

    from transformers import LlamaConfig, LlamaForCausalLM  # before zero.Init: see the module docstring

    deepspeed = start_cpu_rank()
    config = LlamaConfig(**job["model"])
    found = {}
    for mode in MODES:
        emit(event="phase", rank=rank, phase=mode)
        before = _resident_after_trim()
        if mode == "zero.Init":
            with deepspeed.zero.Init(config_dict_or_path=job["config"]):
                model = LlamaForCausalLM(config)
        else:
            model = LlamaForCausalLM(config)
        grew = _resident_after_trim() - before
        params = list(model.parameters())
        held = sum(_storage(p).numel() * _storage(p).element_size() for p in params)
        found[mode] = {"held": held, "grew": grew, "params": sum(_elements(p) for p in params),
                       "largest": max(_elements(p) for p in params)}
        del model, params
        gc.collect()
    return found


def _storage(param):
    return getattr(param, "ds_tensor", param)


def _elements(param):
    return param.ds_numel if hasattr(param, "ds_numel") else param.numel()


def _resident_after_trim():
    """This process's resident memory, after glibc gave its free heap back to the system."""
    import ctypes
    import ctypes.util

    import psutil

    library = ctypes.util.find_library("c")
    if library:
        ctypes.CDLL(library).malloc_trim(0)
    return psutil.Process().memory_info().rss


if __name__ == "__main__":
    import sys

    main(sys.argv[1])
