"""The batch a ds_config trains on, as DeepSpeed itself resolves it: a config may give any two of
train_batch_size, train_micro_batch_size_per_gpu and gradient_accumulation_steps and let DeepSpeed derive the rest.

DeepSpeedConfig reads the world size from torch.distributed; here the world size is given, so its own
resolution (``_initialize_params``, ``_configure_train_batch_size``: runtime/config.py) runs on an instance whose
world size is set by hand, in this process, with no rank started.
"""
import copy


def resolve(config, world_size):
    """(train_batch_size, micro_batch_per_rank, gradient_accumulation_steps) DeepSpeed derives from ``config`` for
    ``world_size`` data-parallel ranks; AssertionError or ValueError with DeepSpeed's words when it refuses."""
    import os

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.runtime.config import DeepSpeedConfig

    resolved = DeepSpeedConfig.__new__(DeepSpeedConfig)
    resolved._param_dict, resolved.global_rank, resolved.world_size = config, 0, world_size
    resolved._initialize_params(copy.deepcopy(config))
    resolved._configure_train_batch_size()
    return (resolved.train_batch_size, resolved.train_micro_batch_size_per_gpu,
            resolved.gradient_accumulation_steps)
