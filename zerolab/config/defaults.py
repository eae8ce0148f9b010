"""Defaults as DeepSpeed 0.19.8 defines them, read from its pydantic models and constants so they cannot drift."""
from zerolab.config.deepspeed_import import import_deepspeed
import functools

_MISSING = object()


@functools.cache
def _block_models():
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.zero.offload_config import DeepSpeedZeroOffloadOptimizerConfig, DeepSpeedZeroOffloadParamConfig
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config, DeepSpeedBF16Config
    return {"zero_optimization": DeepSpeedZeroConfig, "zero_optimization.offload_optimizer":
            DeepSpeedZeroOffloadOptimizerConfig, "zero_optimization.offload_param": DeepSpeedZeroOffloadParamConfig,
            "fp16": DeepSpeedFP16Config, "bf16": DeepSpeedBF16Config, "bfloat16": DeepSpeedBF16Config}


def model_field(path):
    """(model, field name, FieldInfo) for a JSON path inside a block DeepSpeed validates, else None.
    Matches field names and their aliases (e.g. stage3_prefetch_bucket_size -> prefetch_bucket_size)."""
    import_deepspeed()
    block, _, key = path.rpartition(".")
    model = _block_models().get(block)
    if model is None:
        return None
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return model, name, info
    return None


def default_of(path):
    """DeepSpeed's default for a JSON path, or None when DeepSpeed has none (or the path is not a setting)."""
    found = model_field(path)
    if found:
        _, _, info = found
        default = info.default_factory() if info.default_factory is not None else info.default
        if isinstance(default, int) and not isinstance(default, bool):
            return int(default)  # DeepSpeed's pp_int prints as "500,000,000"
        return getattr(default, "value", default)  # enums (stage, device) as their JSON value
    if "." not in path:
        return _top_level_default(path)
    return None


@functools.cache
def _top_level_constants():
    """key -> default from deepspeed/runtime/constants.py pairs such as TRAIN_BATCH_SIZE / TRAIN_BATCH_SIZE_DEFAULT."""
    import_deepspeed()
    from deepspeed.runtime import constants
    names = vars(constants)
    return {value: names[f"{name}_DEFAULT"] for name, value in names.items()
            if name.isupper() and isinstance(value, str) and f"{name}_DEFAULT" in names}


def _top_level_default(key):
    return _top_level_constants().get(key)
