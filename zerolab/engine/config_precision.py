"""What a ds_config says about precision, read as DeepSpeed 0.19.8's config class reads it: the dtype it trains
in, and the dtype of the master weights and Adam moments its ZeRO optimizer keeps. One reader for the config
doctor, `zerolab diff`/`explain` and `zerolab run` ("bfloat16" is the bf16 block's alias); it lives with the engine
because both of those read it and neither may import the other."""

BF16_BLOCKS = ("bf16", "bfloat16")


def bf16_block(config):
    """The bf16 block (or its alias bfloat16) as a dict; {} when there is none."""
    return next((config[name] for name in BF16_BLOCKS if isinstance(config.get(name), dict)), {})


def training_precision(config):
    """"fp16", "bf16" or "fp32": the first enabled of the fp16 and bf16 blocks."""
    for block, name in (("fp16", "fp16"), ("bf16", "bf16"), ("bfloat16", "bf16")):
        value = config.get(block)
        if isinstance(value, dict) and value.get("enabled") is True:
            return name
    return "fp32"


def master_and_moments(config, stage, precision):
    """("bf16" or "fp32", "bf16" or "fp32"): the master weights' and Adam moments' dtype DeepSpeed keeps. The bf16
    keys count only where DeepSpeed's config class accepts them: bf16 training at stages 1-3, and the moments only
    with the master weights."""
    block = bf16_block(config)
    if precision != "bf16" or stage == 0 or block.get("bf16_master_weights_and_grads") is not True:
        return "fp32", "fp32"
    return "bf16", "bf16" if block.get("bf16_optimizer_states") is True else "fp32"
