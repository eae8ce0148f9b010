"""Validation by DeepSpeed 0.19.8 itself, for a chosen data-parallel world size.

DeepSpeedConfig takes the world size from torch.distributed and falls back to 1 when it is not initialised,
and an ``mpu`` argument does not help (``dist.get_rank()`` raises before the mpu is read). Rather than
monkeypatching deepspeed.comm for everyone in the process, ``_ConfigForWorld`` subclasses DeepSpeedConfig and
sets ``self.world_size`` in the one step that uses it, ``_configure_train_batch_size`` (it runs after
``_initialize_params`` and before the sanity checks; nothing else in DeepSpeedConfig reads world_size).
Nothing global changes, so there is nothing to restore. tests/test_config_validate.py checks the result
against DeepSpeed under a patched deepspeed.comm.

DeepSpeed's exceptions become findings:
- pydantic ValidationError (ZeRO, offload, fp16, bf16 models): one finding per error, with the JSON path;
- AssertionError (batch arithmetic, fp16 + bf16), DeepSpeedConfigError (removed features), TypeError /
  ValueError (e.g. "auto" where a number is needed): one finding, the path guessed from the message.
"""
from zerolab.config.deepspeed_import import import_deepspeed
import copy
import difflib
import logging
import re

from zerolab.config.findings import Finding

# DeepSpeed model class -> the top-level key whose block it validates (deepspeed/runtime/config.py getters).
_BLOCK_OF_MODEL = {"DeepSpeedZeroConfig": "zero_optimization", "DeepSpeedFP16Config": "fp16",
                   "DeepSpeedBF16Config": "bf16", "CompileConfig": "compile", "WeightQuantConfig": "weight_quantization"}


def deepspeed_config(config, world_size=1):
    """DeepSpeed's parsed DeepSpeedConfig for ``config`` at ``world_size``; raises what DeepSpeed raises."""
    import_deepspeed()
    from deepspeed.runtime.config import DeepSpeedConfig

    class _ConfigForWorld(DeepSpeedConfig):
        def _configure_train_batch_size(self):
            self.world_size = world_size
            super()._configure_train_batch_size()

    with _quiet_deepspeed_logger() as messages:
        parsed = _ConfigForWorld(config)
    parsed.zerolab_log = messages
    return parsed


def validate(config, world_size=1):
    """(findings, parsed DeepSpeedConfig or None). Findings list every error DeepSpeed reports and the
    deprecation warnings it logs."""
    from pydantic import ValidationError
    from deepspeed.runtime.config import DeepSpeedConfigError

    try:
        parsed = deepspeed_config(copy.deepcopy(config), world_size)
    except ValidationError as error:
        return _from_validation_error(error, config), None
    except DeepSpeedConfigError as error:
        return [Finding(_removed_key_path(str(error), config), "error", f"DeepSpeed rejects it: {error}")], None
    except AssertionError as error:
        return [_from_assertion(str(error), config, world_size)], None
    except (TypeError, ValueError) as error:
        return [_from_type_error(str(error), config)], None
    return [_from_log(message, config) for message in parsed.zerolab_log], parsed


class _quiet_deepspeed_logger:
    """Keep DeepSpeed's INFO lines off stdout while validating, and collect its warnings."""

    def __enter__(self):
        from deepspeed.utils import logger
        self.logger, self.level, self.messages = logger, logger.level, []
        self.handlers = logger.handlers[:]
        collector = logging.Handler(logging.WARNING)
        collector.emit = lambda record: self.messages.append(record.getMessage())
        logger.handlers = [collector]
        logger.setLevel(logging.WARNING)
        return self.messages

    def __exit__(self, *exc):
        self.logger.handlers = self.handlers
        self.logger.setLevel(self.level)
        return False


def _block_key(model_name, config):
    key = _BLOCK_OF_MODEL.get(model_name, model_name)
    if key == "bf16" and "bf16" not in config and "bfloat16" in config:
        return "bfloat16"
    return key


def _from_validation_error(error, config):
    block = _block_key(error.title, config)
    findings = []
    for item in error.errors():
        path = ".".join([block, *map(str, item["loc"])])
        message = item["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        if item["type"] == "extra_forbidden":
            message = "DeepSpeed does not know this key" + _suggestion(error.title, item["loc"], config)
        elif "input" in item and item["type"] != "assertion_error":
            message = f"{message} (got {item['input']!r})"
        findings.append(Finding(path, "error", message))
    return findings


def _suggestion(model_name, loc, config):
    """' ; did you mean X?' from the fields and aliases of the model that owns the key."""
    model = _model_at(model_name, loc[:-1])
    if model is None:
        return "; remove it"
    names = set(model.model_fields)
    names |= {f.alias for f in model.model_fields.values() if f.alias}
    close = difflib.get_close_matches(str(loc[-1]), sorted(names), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else "; remove it (see `zerolab explain` for the keys it takes)"


def _model_at(model_name, loc):
    from deepspeed.runtime.config import DeepSpeedConfig  # noqa: F401  (loads every config model)
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig
    from deepspeed.runtime.precision_config import DeepSpeedFP16Config, DeepSpeedBF16Config
    models = {m.__name__: m for m in (DeepSpeedZeroConfig, DeepSpeedFP16Config, DeepSpeedBF16Config)}
    model = models.get(model_name)
    for part in loc:
        if model is None or part not in model.model_fields:
            return None
        model = _inner_model(model.model_fields[part].annotation)
    return model


def _inner_model(annotation):
    """The pydantic model inside Optional[Model] (offload_param, offload_optimizer)."""
    from pydantic import BaseModel
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _from_assertion(message, config, world_size):
    if "bfloat16 and fp16" in message:
        return Finding(f"{_block_key('DeepSpeedBF16Config', config)}.enabled", "error",
                       "fp16 and bf16 are both enabled; DeepSpeed rejects that. Enable one: bf16 on Ampere or "
                       "newer GPUs, fp16 (with loss scaling) on older ones such as V100 or T4")
    if any(word in message.lower() for word in ("batch", "accumulation")):
        return Finding("train_batch_size", "error",
                       f"DeepSpeed rejects the batch fields at data-parallel world size {world_size}: {message}. "
                       "Make train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x "
                       "world size, or give only two of the three")
    path = next((key for key in config if key in message), "")
    return Finding(path, "error", f"DeepSpeed rejects it: {message}")


def _from_type_error(message, config):
    autos = [key for key, value in config.items() if value == "auto"]
    if autos and "str" in message:
        return Finding(autos[0], "error", f'"auto" is not a value DeepSpeed understands here ({message}); only the '
                       "Hugging Face Trainer / Accelerate replace \"auto\" before DeepSpeed reads the config. "
                       "Write the number")
    for model, key in _BLOCK_OF_MODEL.items():
        if f"{model}() argument after ** must be a mapping" in message:
            key = _block_key(model, config)
            return Finding(key, "error", f"must be a JSON object {{...}}, got {config.get(key)!r}")
    path = next((key for key in config if f"'{key}'" in message or f" {key} " in message), "")
    return Finding(path, "error", f"DeepSpeed cannot read it: {message}")


def _removed_key_path(message, config):
    from deepspeed.runtime import config as ds
    for key, text in ds._REMOVED_TOP_LEVEL_CONFIG_KEYS.items():
        if text == message and key in config:
            return key
    for key, text in ds._REMOVED_ZERO_CONFIG_KEYS.items():
        if text == message:
            return f"zero_optimization.{key}"
    return ""


def _from_log(message, config):
    match = re.search(r"Config parameter (\w+) is deprecated", message)
    path = ""
    if match:
        name = match.group(1)
        path = f"zero_optimization.{name}" if name in config.get("zero_optimization", {}) else name
    return Finding(path, "warning", f"DeepSpeed warns: {message.strip()}")
