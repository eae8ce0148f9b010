"""Each silent trap: one config that triggers the finding, one close to it that does not.

Every triggering config is first shown to be accepted (or, for the floor-division trap, rejected) by
DeepSpeedConfig itself, so the finding is about what DeepSpeed does, not about zerolab's opinion."""
import pytest

from zerolab.config import check_config
from zerolab.config.known_keys import known_top_level_keys

B = {"train_batch_size": 8}


def zero(**block):
    return {**B, "zero_optimization": block}


def findings_at(config, path, world_size=1):
    return [f for f in check_config(config, world_size).findings if f.path == path]


def deepspeed_accepts(config):
    from deepspeed.runtime.config import DeepSpeedConfig
    try:
        DeepSpeedConfig(config)
        return True
    except Exception:  # noqa: BLE001
        return False


# (name, triggering config, path, severity, words in the message, a near config that must not trigger)
TRAPS = [
    ("top-level typo", {**B, "zero_optimisation": {"stage": 2}}, "zero_optimisation", "warning",
     "did you mean 'zero_optimization'", {**B, "zero_optimization": {"stage": 2}}),
    ("unknown key, nothing close", {**B, "my_notes": "x"}, "my_notes", "warning", "silently ignores",
     {**B, "steps_per_print": 10}),
    ("offload_param below stage 3", zero(stage=2, offload_param={"device": "cpu"}), "zero_optimization.offload_param",
     "warning", "works only with stage 3", zero(stage=3, offload_param={"device": "cpu"})),
    ("stage3 key below stage 3", zero(stage=2, stage3_max_live_parameters=10**8),
     "zero_optimization.stage3_max_live_parameters", "warning", "ignores", zero(stage=3, stage3_max_live_parameters=10**8)),
    ("optimizer offload at stage 0", zero(stage=0, offload_optimizer={"device": "cpu"}),
     "zero_optimization.offload_optimizer", "warning", "stage 1, 2 or 3", zero(stage=1, offload_optimizer={"device": "cpu"})),
    ("nvme without nvme_path", zero(stage=3, offload_optimizer={"device": "nvme"}),
     "zero_optimization.offload_optimizer.nvme_path", "error", "nvme_path is not set",
     zero(stage=3, offload_optimizer={"device": "nvme", "nvme_path": "/local_nvme"})),
    ("nvme param offload without path", zero(stage=3, offload_param={"device": "nvme"}),
     "zero_optimization.offload_param.nvme_path", "error", "nvme_path is not set",
     zero(stage=3, offload_param={"device": "nvme", "nvme_path": "/local_nvme"})),
    ("nvme optimizer offload below stage 3", zero(stage=2, offload_optimizer={"device": "nvme", "nvme_path": "/n"}),
     "zero_optimization.offload_optimizer.device", "warning", "CPU RAM instead",
     zero(stage=3, offload_optimizer={"device": "nvme", "nvme_path": "/n"})),
    ("auto dropped inside fp16", {**B, "fp16": {"enabled": "auto"}}, "fp16.enabled", "warning",
     "default (enabled = False)", {**B, "fp16": {"enabled": True}}),
    ("auto dropped inside zero", zero(stage=2, reduce_bucket_size="auto"), "zero_optimization.reduce_bucket_size",
     "warning", "reduce_bucket_size = 500000000", zero(stage=2, reduce_bucket_size=5 * 10**7)),
    ("auto kept as a string", {**B, "gradient_clipping": "auto"}, "gradient_clipping", "error",
     "keeps the string", {**B, "gradient_clipping": 1.0}),
    ("auto in optimizer params", {**B, "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}},
     "optimizer.params.lr", "error", "Hugging Face", {**B, "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}}}),
    ("contiguous_gradients forced on", zero(stage=2, contiguous_gradients=False, offload_optimizer={"device": "cpu"}),
     "zero_optimization.contiguous_gradients", "warning", "force it on", zero(stage=2, contiguous_gradients=False)),
    ("pin_memory default", zero(stage=2, offload_optimizer={"device": "cpu"}),
     "zero_optimization.offload_optimizer.pin_memory", "note", "pins the offloaded memory by default",
     zero(stage=2, offload_optimizer={"device": "cpu", "pin_memory": False})),
    ("overlap_comm default", zero(stage=2), "zero_optimization.overlap_comm", "note", "picks False for stage 2",
     zero(stage=2, overlap_comm=True)),
]


@pytest.mark.parametrize("name, config, path, severity, words, near", TRAPS, ids=[t[0] for t in TRAPS])
def test_trap_is_found_and_its_neighbour_is_not(name, config, path, severity, words, near):
    assert deepspeed_accepts(config), "the trap must be something DeepSpeed lets through"
    found = findings_at(config, path)
    assert [f.severity for f in found] == [severity], found
    assert words in found[0].message
    assert findings_at(near, path) == []


def test_overlap_comm_note_states_what_deepspeed_really_picks():
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    for stage in (1, 2, 3):
        picked = DeepSpeedZeroConfig(stage=stage).overlap_comm
        [note] = findings_at(zero(stage=stage), "zero_optimization.overlap_comm")
        assert f"picks {picked} for stage {stage}" in note.message


def test_floor_division_trap_explained_with_the_derived_value():
    config = {"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4}
    assert not deepspeed_accepts(config)
    [error] = check_config(config).errors
    assert error.path == "train_batch_size" and "30 // 4 // 1 = 7" in error.message
    assert check_config({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4}).valid


def test_floor_division_trap_for_the_micro_batch():
    [error] = check_config({"train_batch_size": 30, "gradient_accumulation_steps": 4}, world_size=2).errors
    assert "30 // 2 // 4 = 3" in error.message
    assert check_config({"train_batch_size": 32, "gradient_accumulation_steps": 4}, world_size=2).valid


def test_every_removed_feature_is_reported_at_once():
    config = {**B, "amp": {"enabled": True}, "sparse_attention": {},
              "zero_optimization": {"stage": 3, "mics_shard_size": 8}}
    paths = [e.path for e in check_config(config).errors]
    assert sorted(paths) == ["amp", "sparse_attention", "zero_optimization.mics_shard_size"]


def test_known_keys_are_the_keys_deepspeed_reads():
    keys = known_top_level_keys()
    for key in ("train_batch_size", "zero_optimization", "fp16", "bf16", "optimizer", "scheduler",
                "gradient_clipping", "activation_checkpointing", "tensorboard", "steps_per_print"):
        assert key in keys
    assert "enabled" not in keys and "loss_scale" not in keys  # block-level names from constants.py are not top-level


def test_a_known_key_deepspeed_reads_is_never_flagged():
    config = {**B, **{key: {} for key in ("tensorboard", "wandb", "flops_profiler", "activation_checkpointing")}}
    assert not [f for f in check_config(config).findings if f.severity != "note"]
