"""Lesson 05's claims about DeepSpeed 0.19.8 and transformers 5.24 (autograder/claims/05_config_doctor.toml), each
checked on the library: DeepSpeed's config classes and estimators, transformers' Trainer config code, and one run
on 2 CPU ranks (tests/claim_runs_05.py) for what only deepspeed.initialize and training show: the ZeRO stage line
the engine logs, when stage 2 reduces gradients and what it keeps, and where an NVMe offload without nvme_path
fails."""
import copy
import re

import pytest

from conftest import probe_launcher


def _config(config):
    from deepspeed.runtime.config import DeepSpeedConfig

    return DeepSpeedConfig(copy.deepcopy({"train_batch_size": 8, **config}))


@pytest.fixture(scope="module")
def ranks():
    """Rank 0's and rank 1's observations of the run (tests/claim_runs_05.py)."""
    from zerolab.handmade.core import harness

    with probe_launcher():
        return harness.run({"kind": "claim_runs_05:lesson_05"}, 2, timeout=300, progress=False)


def test_offload_fp16_and_bf16_blocks_refuse_unknown_keys():
    """offload-fp16-bf16-blocks-strict: not only zero_optimization: its offload blocks, fp16 and bf16 are strict
    models too, and the error names the key."""
    from pydantic import ValidationError

    for block in ({"fp16": {"enabled": True, "loss_scal": 0}}, {"bf16": {"enabled": True, "loss_scal": 0}},
                  {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu", "loss_scal": 0}}},
                  {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "loss_scal": 0}}}):
        with pytest.raises(ValidationError, match="loss_scal"):
            _config(block)
    assert _config({"fp16_": {"enabled": True}}).float16_config.enabled is False  # the top level stays loose


def test_the_trainer_fills_auto_from_its_arguments_and_deepspeed_does_not():
    """hf-trainer-fills-auto: transformers' HfTrainerDeepSpeedConfig.trainer_config_process replaces each "auto"
    with the TrainingArguments value (train_batch_size = world size x micro batch x accumulation); DeepSpeed given
    the same config keeps no number for them. (Its base class comes from accelerate, absent here: the lookups
    accelerate provides are stood in for; the filling is transformers' own code.)"""
    from types import SimpleNamespace

    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    class Trainers(HfTrainerDeepSpeedConfig):
        def __init__(self, config):  # accelerate's HfDeepSpeedConfig.__init__ only stores the dict
            self.config, self._dtype, self.mismatches = config, None, []

        def find_config_node(self, key):
            *parents, last = key.split(".")
            node = self.config
            for parent in parents:
                node = node.get(parent)
                if node is None:
                    return None, last
            return node, last

        def get_value(self, key, default=None):
            node, last = self.find_config_node(key)
            return default if node is None else node.get(last, default)

        def is_true(self, key):
            return bool(self.get_value(key))

    config = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
              "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
              "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}}}
    args = SimpleNamespace(world_size=8, per_device_train_batch_size=4, gradient_accumulation_steps=2,
                           max_grad_norm=1.0, learning_rate=3e-4, adam_beta1=0.9, adam_beta2=0.95, adam_epsilon=1e-8,
                           weight_decay=0.1, save_on_each_node=False, fp16=False, fp16_full_eval=False, bf16=True,
                           bf16_full_eval=False)
    trainer = Trainers(copy.deepcopy(config))
    trainer.trainer_config_process(args)
    assert trainer.config == {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4,
                              "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
                              "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "weight_decay": 0.1}}}
    alone = _config({"bf16": {"enabled": "auto"}, "optimizer": config["optimizer"]})
    assert alone.bfloat16_config.enabled is False and alone.optimizer_params["lr"] == "auto"


def test_every_removed_feature_is_an_error_that_points_to_issue_8489():
    """removed-features-raise-pointing-to-issue-8489: each removed feature's key (the top-level blocks and the
    zero_optimization keys DeepSpeed lists) fails the config with DeepSpeedConfigError; MiCS's message names the
    key and links DeepSpeed issue #8489, as every removal but elasticity's does."""
    from deepspeed.runtime import config as ds
    from deepspeed.runtime.config import DeepSpeedConfigError

    assert {"mics_shard_size", "mics_hierarchical_params_gather"} <= set(ds._REMOVED_ZERO_CONFIG_KEYS)
    for key, message in ds._REMOVED_TOP_LEVEL_CONFIG_KEYS.items():
        with pytest.raises(DeepSpeedConfigError, match=re.escape(message[:40])):
            _config({key: {}})
    for key, message in ds._REMOVED_ZERO_CONFIG_KEYS.items():
        with pytest.raises(DeepSpeedConfigError, match=re.escape(message[:40])):
            _config({"zero_optimization": {"stage": 3, key: 8}})
    with pytest.raises(DeepSpeedConfigError) as mics:
        _config({"zero_optimization": {"stage": 3, "mics_shard_size": 8}})
    assert "mics_shard_size" in str(mics.value) and "github.com/deepspeedai/DeepSpeed/issues/8489" in str(mics.value)
    linked = [key for key, message in {**ds._REMOVED_TOP_LEVEL_CONFIG_KEYS, **ds._REMOVED_ZERO_CONFIG_KEYS}.items()
              if "issues/8489" in message]
    assert len(linked) >= 13, linked


def test_auto_inside_fp16_and_bf16_is_dropped_for_the_default():
    """auto-dropped-in-precision-blocks: "auto" for a field of fp16 or bf16 is dropped and the field takes its
    default (bf16 stays off, fp16's loss scale stays dynamic, its initial power 16)."""
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config

    parsed = _config({"fp16": {"enabled": True, "loss_scale": "auto", "initial_scale_power": "auto"},
                      "bf16": {"enabled": "auto"}})
    default = DeepSpeedFP16Config()
    assert parsed.bfloat16_config.enabled is False
    assert (parsed.float16_config.loss_scale, parsed.float16_config.initial_scale_power) == (
        default.loss_scale, default.initial_scale_power) == (0, 16)


def test_deepspeed_reports_only_the_first_error_of_a_config():
    """config-stops-at-first-error: a config with several errors fails on one of them, and the message says
    nothing of the others (so a doctor's first run does not list everything)."""
    from deepspeed.runtime.config import DeepSpeedConfigError

    broken = {"fp16": {"enabled": True}, "bf16": {"enabled": True}, "zero_optimization": {"stage": 3,
                                                                                           "mics_shard_size": 8}}
    with pytest.raises(DeepSpeedConfigError) as first:
        _config(broken)
    assert "mics_shard_size" in str(first.value) and "fp16" not in str(first.value)
    del broken["zero_optimization"]["mics_shard_size"]
    with pytest.raises(AssertionError, match="cannot be simultaneously enabled"):
        _config(broken)


def test_a_batch_field_set_to_auto_is_a_type_error_about_a_string():
    """auto-batch-fields-raise-typeerror: DeepSpeed given "auto" batch fields fails with a TypeError about a str:
    in its // when it derives a missing field, in its > checks when all three are given (a Hugging Face example
    sets all three)."""
    for given, words in (({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"}, "//"),
                         ({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 4}, "//"),
                         ({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                           "gradient_accumulation_steps": "auto"}, "'>' not supported")):
        with pytest.raises(TypeError, match=re.escape(words)) as error:
            from deepspeed.runtime.config import DeepSpeedConfig

            DeepSpeedConfig(dict(given))
        assert "str" in str(error.value)


@pytest.mark.slow
def test_the_engine_logs_the_zero_stage_it_runs_and_stage_0_logs_none(ranks):
    """engine-logs-its-zero-stage: deepspeed.initialize logs "Creating <dtype> ZeRO stage N optimizer" on rank 0
    at stages 1-3; at stage 0 no line names a ZeRO stage (so a misspelled zero block shows by its absence)."""
    assert any(re.search(r"Creating torch.bfloat16 ZeRO stage 2 optimizer", line) for line in ranks[0]["stage2_log"])
    assert not any("ZeRO stage" in line for line in ranks[0]["stage0_log"])


@pytest.mark.slow
def test_nvme_offload_without_a_path_fails_building_the_swap_folder(ranks):
    """nvme-without-path-fails-at-start-up: the config passes, but deepspeed.initialize at stage 3 with
    offload_optimizer "nvme" and no nvme_path fails at start-up, in os.path.join(None, ...) where ZeRO-3 builds its
    swap folder (_configure_tensor_swapping)."""
    for result in ranks:
        failure = result["nvme"]
        assert failure["error"] == "TypeError" and "NoneType" in failure["message"], failure
        assert "_configure_tensor_swapping" in failure["functions"] and failure["functions"][-1] == "join", failure
        assert "stage3.py" in failure["files"], failure
