"""The course's reference configs: lesson 04's skeleton with its three answers filled in.

Teaching cells use these so that they run before (or without) a learner's answer; the learner's own config is
shown next to them when it exists.
"""
import copy

_ZERO2_OFFLOAD = {
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
    "fp16": {"enabled": True, "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
             "hysteresis": 2, "min_loss_scale": 1},
    "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True,
                          "offload_optimizer": {"device": "cpu", "pin_memory": True}},
    "train_batch_size": 32,
    "train_micro_batch_size_per_gpu": 4,
    "gradient_accumulation_steps": 8,
}


def zero2_offload():
    """ZeRO-2 + overlap_comm + optimizer offload to pinned CPU memory (a fresh copy)."""
    return copy.deepcopy(_ZERO2_OFFLOAD)


def zero3_offload(config):
    """A copy of ``config`` with ZeRO-3 and both optimizer and parameters offloaded to pinned CPU memory."""
    result = copy.deepcopy(config)
    zero = result.setdefault("zero_optimization", {})
    zero["stage"] = 3
    for block in ("offload_optimizer", "offload_param"):
        zero[block] = {"device": "cpu", "pin_memory": True}
    return result
