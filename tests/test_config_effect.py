"""config_effect reads the settings DeepSpeed will use and hands them to zerolab.engine.memory / zerolab.engine.comm;
the memory figures also equal DeepSpeed's own estimators where those apply."""
import pytest

from zerolab.engine import comm, memory
from zerolab.config import compare_configs, config_effect, read_settings
from zerolab.errors import UserError

P13 = 13 * 10**9


def seed(world_size=8, **zero):
    block = {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
             "offload_optimizer": {"device": "cpu", "pin_memory": True}}
    block.update(zero)
    return {"fp16": {"enabled": True, "loss_scale": 0}, "train_micro_batch_size_per_gpu": 4,
            "gradient_accumulation_steps": 8, "train_batch_size": 32 * world_size, "zero_optimization": block}


def test_effect_equals_zerolab_memory_and_comm_for_the_same_inputs():
    effect = config_effect(seed(), "13B", gpus_per_node=8)
    assert effect.memory == memory.estimate(P13, 2, 8, 1, offload_optimizer="cpu", offload_param="none",
                                            precision="fp16", accounting="deepspeed")
    assert effect.traffic == comm.traffic(P13, 2, 8, grad_accum=8, precision="fp16", reduce_bucket_size=500_000_000,
                                          allgather_bucket_size=500_000_000, offload_optimizer="cpu")


def test_zero2_effect_matches_deepspeed_estimator():
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs as ds_zero2
    for offload, config in ((True, seed()), (False, seed(offload_optimizer={"device": "none"}))):
        effect = config_effect(config, P13, gpus_per_node=8)
        cpu, gpu = ds_zero2(P13, num_gpus_per_node=8, num_nodes=1, cpu_offload=offload)
        assert (effect.memory.gpu_bytes, effect.memory.cpu_bytes) == (int(gpu), int(cpu))


@pytest.mark.parametrize("offload_param, offload_optimizer", [("cpu", "cpu"), ("none", "cpu"), ("none", "none")])
def test_zero3_effect_matches_deepspeed_estimator(offload_param, offload_optimizer):
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs as ds_zero3
    largest = 50257 * 5120
    config = seed(stage=3, offload_param={"device": offload_param}, offload_optimizer={"device": offload_optimizer})
    effect = config_effect(config, P13, gpus_per_node=8, largest_layer_params=largest)
    cpu, gpu, _ = ds_zero3(P13, largest, num_gpus_per_node=8, num_nodes=1, cpu_offload=offload_optimizer == "cpu",
                           cpu_offload_params=offload_param == "cpu", zero_init=True)
    assert (effect.memory.gpu_bytes, effect.memory.cpu_bytes) == (int(gpu), int(cpu))


def test_settings_follow_deepspeed_defaults_and_derivations():
    from deepspeed.runtime.config import DeepSpeedConfig
    s = read_settings({"train_batch_size": 16, "zero_optimization": {"stage": 3}, "bf16": {"enabled": True}})
    ds = DeepSpeedConfig({"train_batch_size": 16, "zero_optimization": {"stage": 3}})
    assert (s.stage, s.precision, s.overlap_comm) == (3, "bf16", ds.zero_config.overlap_comm)
    assert (s.reduce_bucket_size, s.prefetch_bucket_size) == (ds.zero_config.reduce_bucket_size,
                                                              ds.zero_config.prefetch_bucket_size)
    assert read_settings({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4}, world_size=8).grad_accum == 2
    assert read_settings({"train_batch_size": 8}).precision == "fp32"


def test_settings_deepspeed_ignores_are_ignored_in_the_effect():
    s = read_settings({"train_batch_size": 8, "zero_optimization": {
        "stage": 2, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "nvme", "nvme_path": "/n"}}})
    assert (s.offload_param, s.offload_optimizer) == ("none", "cpu")
    assert read_settings({"train_batch_size": 8, "fp16": {"enabled": "auto"}}).precision == "fp32"


def test_diff_lists_changed_fields_and_both_effects():
    a, b = seed(), seed(stage=3)
    result = compare_configs(a, b, "7B", gpus_per_node=8)
    assert result.changed == [("zero_optimization.stage", 2, 3)]
    assert result.effect_a == config_effect(a, "7B", 8) and result.effect_b == config_effect(b, "7B", 8)
    assert result.effect_b.traffic.volume_in_params > result.effect_a.traffic.volume_in_params


def test_bad_inputs_are_user_errors():
    with pytest.raises(UserError, match="13Q"):
        config_effect(seed(), "13Q", 8)
    with pytest.raises(UserError, match="zero_optimization is invalid"):
        config_effect({"train_batch_size": 8, "zero_optimization": {"stage": 9}}, "7B", 8)


@pytest.mark.parametrize("stage, bf16_block, name", [
    (2, {"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}, "bf16"),
    (2, {"bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}, "bfloat16"),
    (3, {"bf16_master_weights_and_grads": True}, "bf16"),
    (1, {}, "bf16"),
])
def test_bf16_master_weights_and_moments_are_read_as_deepspeeds_config_class_reads_them(stage, bf16_block, name):
    """The settings take the master weights' and moments' dtype from the keys DeepSpeed's own bf16 config parses,
    and the paper accounting then counts them (zerolab.engine.memory, checked on CPU ranks by
    tests/test_run_bf16_master.py); DeepSpeed's estimator counts fp32 only, so the deepspeed accounting refuses,
    naming the key and the way out."""
    from deepspeed.runtime.config import DeepSpeedConfig

    config = {"train_batch_size": 8, "zero_optimization": {"stage": stage}, name: {"enabled": True, **bf16_block}}
    parsed = DeepSpeedConfig(dict(config)).bfloat16_config
    s = read_settings(config)
    expected_master = "bf16" if parsed.bf16_master_weights_and_grads else "fp32"
    expected_moments = "bf16" if parsed.bf16_optimizer_states else "fp32"
    assert (s.master, s.moments) == (expected_master, expected_moments)
    effect = config_effect(config, "7B", gpus_per_node=8, accounting="paper")
    assert effect.memory == memory.estimate(7 * 10**9, stage, 8, precision="bf16", master=expected_master,
                                            moments=expected_moments)
    if expected_master == "bf16":
        with pytest.raises(UserError, match="bf16_master_weights_and_grads.*--accounting paper"):
            config_effect(config, "7B", gpus_per_node=8)
    else:
        assert config_effect(config, "7B", gpus_per_node=8).memory.accounting == "deepspeed"


def test_diff_shows_what_bf16_master_weights_and_moments_save():
    a = {"train_batch_size": 8, "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}
    b = {**a, "bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}}
    result = compare_configs(a, b, "7B", gpus_per_node=8, accounting="paper")
    params, partition = 7 * 10**9, 7 * 10**9 // 8
    # 12 bytes of fp32 master weights and moments a parameter become 6, on each GPU's partition
    assert result.effect_a.memory.gpu_bytes - result.effect_b.memory.gpu_bytes == (12 - 6) * partition
    assert result.effect_a.memory.gpu_bytes == 2 * params + 2 * partition + 12 * partition
