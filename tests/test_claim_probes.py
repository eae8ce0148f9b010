"""Sentences of the lessons about what a library does, checked on the library itself where no run of the course
shows them (the other claims are checked where the runs are: tests/test_ckpt.py, tests/test_simulate.py, ...).

- Hugging Face's Llama keeps attention's output once (lesson 01, "Whose code keeps the activations?"; lesson 07
  Q19): SDPA's output is laid out so that transpose-then-contiguous() is a no-op, so the output projection saves
  the very storage SDPA saved for its own backward. Were it copied, the copy would be a second saved storage.
- On DeepSpeed's default pin path a pinned buffer takes the next power of two of its size (lessons 02, section 4,
  and 07 Q13; zerolab.engine.host_memory counts it): DeepSpeed leaves pinning to torch unless DS_PIN_MEMORY_BACKEND=native,
  and torch's caching host allocator, as its installed headers define it, rounds every block it has not been told
  to leave alone. Measuring it needs CUDA (scripts/gpu_check.py); the headers are the allocator's definition.
- `overlap_comm` is off by default at ZeRO stages 0-2 and on at stage 3 (lessons 07 Q10 and 08, section 3):
  DeepSpeed's own config class resolves a config that leaves it out.
- Given two of the three batch terms, DeepSpeed derives the third by floor division, then asserts their product
  (lesson 04, exercise 2).
- What DeepSpeed's config classes accept, refuse and fill in (lessons 02, 04 and 05): pin_memory's default, strict
  blocks and a loose top level, "auto", nvme without a path, offload_param below stage 3, fp16 with bf16, MiCS.
"""
import re
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")


def test_hugging_face_llama_keeps_attentions_output_once(monkeypatch):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=1, vocab_size=100, attn_implementation="sdpa")
    layer, rotary = LlamaDecoderLayer(config, layer_idx=0), LlamaRotaryEmbedding(config)
    hidden = torch.randn(2, 16, 64, requires_grad=True)
    positions = torch.arange(16).unsqueeze(0).expand(2, -1)

    sdpa_outputs, projection_inputs = [], []
    real_sdpa = torch.nn.functional.scaled_dot_product_attention

    def watched_sdpa(*args, **kwargs):
        out = real_sdpa(*args, **kwargs)
        sdpa_outputs.append(out.untyped_storage().data_ptr())
        return out

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", watched_sdpa)
    layer.self_attn.o_proj.register_forward_pre_hook(
        lambda module, inputs: projection_inputs.append(inputs[0].untyped_storage().data_ptr()))
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.untyped_storage().data_ptr()) or t,
                                                  lambda t: t):
        layer(hidden, attention_mask=None, position_ids=positions, position_embeddings=rotary(hidden, positions))
    assert len(sdpa_outputs) == 1 and len(projection_inputs) == 1, "the layer did not run SDPA once"
    assert projection_inputs == sdpa_outputs, "the output projection got a copy of attention's output"
    assert sdpa_outputs[0] in saved, "SDPA's output is not among the tensors saved for backward"


def test_overlap_comm_defaults_off_below_stage_3_and_on_at_stage_3():
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    assert [DeepSpeedZeroConfig(stage=stage).overlap_comm for stage in (0, 1, 2, 3)] == [False, False, False, True]


def test_deepspeeds_default_pinning_goes_through_torchs_power_of_two_allocator(monkeypatch):
    from deepspeed.utils.pin_memory import get_active_native_pinned_memory

    monkeypatch.delenv("DS_PIN_MEMORY_BACKEND", raising=False)
    assert get_active_native_pinned_memory() is None, "DeepSpeed's default no longer pins through torch"
    headers = Path(torch.__file__).parent / "include"
    allocator = (headers / "ATen" / "core" / "CachingHostAllocator.h").read_text()
    rounding = re.search(r"roundSize = \[&\]\(\) -> size_t \{(.*?)\}\(\);", allocator, re.S)
    assert rounding, "torch's caching host allocator no longer computes roundSize"
    assert "PowerOf2Ceil(size)" in rounding.group(1)
    thresholds = re.findall(r"size <= (\w+)\(\)", rounding.group(1))
    assert set(thresholds) == {"pinned_max_round_threshold", "pinned_max_cached_size"}, thresholds
    config = (headers / "c10" / "core" / "AllocatorConfig.h").read_text()
    for threshold in thresholds:
        assert re.search(rf"size_t {threshold}_\{{std::numeric_limits<size_t>::max\(\)\}}", config), \
            f"{threshold} no longer defaults to the largest size_t: small buffers only are rounded"


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_training_never_calls_inference_all_reduce_the_only_user_of_the_shm_op(fresh_launcher, stage):
    """Claim deepspeed-shm-op-only-for-inference (lesson 06, section 4), on 2 CPU ranks: DeepSpeed's CPU accelerator
    offers its shared-memory comm op (and builds it when distributed starts unless told not to), yet two steps of
    ZeRO training with gradient accumulation call every collective they need through the comm backend and never
    inference_all_reduce, the one method that uses the op; told not to, DeepSpeed leaves it unbuilt."""
    from zerolab.handmade.core import harness

    for result in harness.run({"kind": "rank_probe:deepspeed_collectives", "stage": stage}, 2, progress=False):
        assert result["offered"] and not result["built"] and result["steps"] == 2, result
        assert "inference_all_reduce" not in result["calls"], result["calls"]
        assert result["calls"].get("all_reduce", 0) + result["calls"].get("reduce_scatter_tensor", 0) > 0, result


def test_deepspeed_derives_a_missing_batch_term_by_floor_division_then_asserts():
    """Lesson 04, exercise 2 (claim batch-term-derived-by-floor-division): given two of train_batch_size, the micro
    batch and the accumulation steps, DeepSpeed's config derives the third with // and then asserts the product."""
    from deepspeed.runtime.config import DeepSpeedConfig

    derived = DeepSpeedConfig({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})
    assert derived.gradient_accumulation_steps == 8
    for given, product in (({"train_micro_batch_size_per_gpu": 4}, "30 != 4 * 7 * 1"),
                           ({"gradient_accumulation_steps": 4}, "30 != 7 * 4 * 1")):
        with pytest.raises(AssertionError, match=re.escape(product)):
            DeepSpeedConfig({"train_batch_size": 30, **given})


def test_offload_pins_host_memory_by_default():
    """Lessons 02 (section 4) and 04 (claim offload-pin-memory-defaults-true): both offload blocks default to
    pin_memory true in DeepSpeed 0.19.8 (older releases defaulted to false)."""
    from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadOptimizerConfig, DeepSpeedZeroOffloadParamConfig

    assert DeepSpeedZeroOffloadOptimizerConfig().pin_memory is True
    assert DeepSpeedZeroOffloadParamConfig().pin_memory is True


def _config(config):
    from deepspeed.runtime.config import DeepSpeedConfig

    return DeepSpeedConfig({"train_batch_size": 8, **config})


def test_blocks_are_strict_and_the_top_level_ignores_what_it_does_not_know():
    """Lesson 05 (claim config-blocks-strict-top-level-loose): an unknown key inside zero_optimization is an error
    that names it; a misspelled block name is ignored, so ZeRO falls back to stage 0."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="overlap_com"):
        _config({"zero_optimization": {"stage": 2, "overlap_com": True}})
    assert _config({"zero_optimisation": {"stage": 2, "overlap_comm": True}}).zero_optimization_stage == 0


def test_auto_is_dropped_inside_blocks_and_crashes_the_batch_fields():
    """Lesson 05 (claim auto-dropped-inside-blocks): "auto" inside zero_optimization is dropped and the default used;
    "auto" for a batch field at the top level fails in the batch arithmetic."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    default = DeepSpeedZeroConfig()
    parsed = _config({"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto", "allgather_bucket_size": "auto"}})
    assert parsed.zero_config.reduce_bucket_size == default.reduce_bucket_size
    assert parsed.zero_config.allgather_bucket_size == default.allgather_bucket_size
    with pytest.raises(TypeError):
        _config({"train_micro_batch_size_per_gpu": "auto"})


def test_nvme_offload_without_a_path_passes_the_config():
    """Lesson 05 (claim nvme-without-path-accepted): device "nvme" with no nvme_path passes DeepSpeed's config
    validation; nvme_path stays None until a run needs the swap folder."""
    parsed = _config({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"}}})
    assert parsed.zero_config.offload_optimizer.device == "nvme"
    assert parsed.zero_config.offload_optimizer.nvme_path is None


def test_the_stage_1_2_optimizer_takes_no_parameter_offload():
    """Lesson 05 (claim offload-param-ignored-below-stage-3): the ZeRO-1/2 optimizer has no parameter-offload input
    (only the optimizer's), so offload_param in a stage 1 or 2 config never reaches it; ZeRO-3's takes both."""
    import inspect

    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from deepspeed.runtime.zero.stage_1_and_2 import DeepSpeedZeroOptimizer

    def offload_inputs(cls):
        return {name for name in inspect.signature(cls.__init__).parameters if name.startswith("offload")}

    assert offload_inputs(DeepSpeedZeroOptimizer) == {"offload_optimizer_config"}
    assert {"offload_optimizer_config", "offload_param_config"} <= offload_inputs(DeepSpeedZeroOptimizer_Stage3)


def test_fp16_with_bf16_and_mics_are_refused():
    """Lesson 05 (claim config-refuses-fp16-with-bf16-and-mics): both half precisions enabled, or MiCS's
    mics_shard_size (removed), fail DeepSpeed's config with a message that says so."""
    from deepspeed.runtime.config import DeepSpeedConfigError

    with pytest.raises(AssertionError, match="cannot be simultaneously enabled"):
        _config({"fp16": {"enabled": True}, "bf16": {"enabled": True}})
    with pytest.raises(DeepSpeedConfigError, match="mics_shard_size"):
        _config({"zero_optimization": {"stage": 3, "mics_shard_size": 2}})


def test_fp16_enabled_auto_outside_the_trainer_trains_in_fp32():
    """Lesson 05 (claim fp16-auto-means-fp32): DeepSpeed given fp16.enabled "auto" drops it, so neither half
    precision is on: the run trains in fp32."""
    parsed = _config({"fp16": {"enabled": "auto"}})
    assert (parsed.float16_config.enabled, parsed.bfloat16_config.enabled) == (False, False)
    assert _config({"fp16": {"enabled": True}}).float16_config.enabled is True
