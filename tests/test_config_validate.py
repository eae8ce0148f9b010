"""Validation agrees with DeepSpeed itself: what DeepSpeedConfig rejects is invalid here, what it accepts is valid,
and the world size is the one DeepSpeed would see under torch.distributed (simulated by patching deepspeed.comm)."""
import pytest

from zerolab.config import check_config
from zerolab.config.validate import deepspeed_config

SEED = {  # the seed tutorial's answer to lesson 04
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "fp16": {"enabled": True, "loss_scale": 0},
    "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 8, "train_batch_size": 32,
    "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
                          "offload_optimizer": {"device": "cpu", "pin_memory": True}},
}

CASES = [
    SEED,
    {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4},
    {"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4},
    {"train_batch_size": 8, "zero_optimization": {"stage": 4}},
    {"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}}},
    {"train_batch_size": 8, "zero_optimization": {"stage": 2, "overlap_com": True}},
    {"train_batch_size": 8, "zero_optimization": {"reduce_bucket_size": 0}},
    {"train_batch_size": 8, "fp16": {"enabled": True, "loss_scale": -1}},
    {"train_batch_size": 8, "fp16": {"enabled": True}, "bf16": {"enabled": True}},
    {"train_batch_size": 8, "amp": {"enabled": True}},
    {"train_batch_size": 8, "zero_optimization": {"stage": 3, "mics_shard_size": 8}},
    {"train_batch_size": "auto"},
    {"train_batch_size": 8, "zero_optimization": 5},
    {"gradient_accumulation_steps": 4},
    {"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}},
]


def deepspeed_accepts(config, world_size, monkeypatch):
    """DeepSpeed's verdict, with deepspeed.comm answering as if torch.distributed ran world_size ranks."""
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: world_size)
    try:
        DeepSpeedConfig(config)
        return True
    except Exception:  # noqa: BLE001 - any exception is a rejection
        return False


@pytest.mark.parametrize("world_size", [1, 8])
@pytest.mark.parametrize("config", CASES)
def test_invalid_exactly_when_deepspeed_rejects(config, world_size, monkeypatch):
    accepted = deepspeed_accepts(config, world_size, monkeypatch)
    monkeypatch.undo()
    report = check_config(config, world_size=world_size)
    if not accepted:
        assert not report.valid
    else:  # accepted by DeepSpeed: any error must be one of zerolab's "cannot work" findings, none here
        assert report.valid, report.errors


def test_world_size_matches_patched_deepspeed_comm(monkeypatch):
    ours = deepspeed_config({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4}, world_size=8)
    import deepspeed.comm as dist
    from deepspeed.runtime.config import DeepSpeedConfig
    monkeypatch.setattr(dist, "get_rank", lambda *a, **k: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda *a, **k: 8)
    theirs = DeepSpeedConfig({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})
    assert (ours.world_size, ours.gradient_accumulation_steps) == (theirs.world_size, theirs.gradient_accumulation_steps) == (8, 2)


def test_validating_changes_nothing_global():
    import deepspeed.comm as dist
    before = (dist.get_rank, dist.get_world_size)
    config = {"train_batch_size": 8, "zero_optimization": {"stage": 2}}
    check_config(config, world_size=8)
    assert (dist.get_rank, dist.get_world_size) == before
    assert config == {"train_batch_size": 8, "zero_optimization": {"stage": 2}}
    assert not dist.is_initialized()


def test_seed_config_valid_on_one_gpu_and_batch_error_on_eight():
    assert check_config(SEED, world_size=1).as_dict() == {"valid": True, "errors": [], "warnings": []}
    report = check_config(SEED, world_size=8)
    assert not report.valid
    [error] = report.errors
    assert error.path == "train_batch_size" and "32 != 4 * 8 * 8" in error.message


@pytest.mark.parametrize("config, path, words", [
    ({"train_batch_size": 8, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "gpu"}}},
     "zero_optimization.offload_optimizer.device", "'none', 'cpu' or 'nvme'"),
    ({"train_batch_size": 8, "zero_optimization": {"stage": 2, "overlap_com": True}},
     "zero_optimization.overlap_com", "did you mean 'overlap_comm'"),
    ({"train_batch_size": 8, "zero_optimization": {"offload_optimizer": {"device": "cpu", "pin_memroy": True}}},
     "zero_optimization.offload_optimizer.pin_memroy", "did you mean 'pin_memory'"),
    ({"train_batch_size": 8, "fp16": {"loss_scale": -1}}, "fp16.loss_scale", ">= 0"),
    ({"train_batch_size": 8, "bfloat16": {"enabled": "maybe"}}, "bfloat16.enabled", "valid boolean"),
    ({"train_batch_size": 8, "fp16": {"enabled": True}, "bf16": {"enabled": True}}, "bf16.enabled", "Enable one"),
    ({"train_batch_size": 8, "zero_optimization": 5}, "zero_optimization", "JSON object"),
    ({"train_batch_size": "auto"}, "train_batch_size", "Hugging Face"),
    ({"gradient_accumulation_steps": 4}, "train_batch_size", "train_micro_batch_size_per_gpu"),
])
def test_deepspeed_errors_become_findings_with_a_path(config, path, words):
    report = check_config(config)
    assert [e.path for e in report.errors] == [path], report.errors
    assert words in report.errors[0].message
    assert "Traceback" not in report.errors[0].message


def test_deprecation_warnings_logged_by_deepspeed_become_warnings():
    report = check_config({"train_batch_size": 8, "zero_optimization": {"stage": 2, "cpu_offload": True}})
    assert report.valid
    assert any(w.path == "zero_optimization.cpu_offload" and "deprecated" in w.message for w in report.warnings)
