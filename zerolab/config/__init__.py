"""The config doctor: read a DeepSpeed ``ds_config``, say whether DeepSpeed 0.19.8 would accept it, what it
silently ignores, what each field means, and what the config costs in memory and traffic.

Public API (everything a lesson or the CLI needs)::

    from zerolab.config import load_config, check_config, explain_config, config_effect, compare_configs

    config = load_config("ds_config.json")        # a path, JSON text or a dict -> dict (UserError if unreadable)
    report = check_config(config, world_size=8)   # -> Report
    report.valid                                  # True when DeepSpeed would accept it and nothing makes it unworkable
    report.errors, report.warnings                # lists of Finding(path, severity, message)
    report.as_dict()                              # {"valid": ..., "errors": [{"path", "message"}], "warnings": [...]}

    for line in explain_config(config):           # -> list of Explanation, one per field that is set
        print(line.path, line.value, line.default, line.text)

    effect = config_effect(config, params="7B", gpus_per_node=8, nodes=1)   # -> Effect
    effect.settings                               # Settings: stage, offload devices, precision, buckets, grad_accum
    effect.memory                                 # zerolab.engine.memory.Estimate (per-GPU, per-node host, NVMe bytes)
    effect.traffic                                # zerolab.engine.comm.Traffic (per rank, per optimizer step)

    diff = compare_configs(config_a, config_b, params="7B", gpus_per_node=8)   # -> Comparison
    diff.changed                                  # [(path, value_in_a, value_in_b)], "<unset>" where absent
    diff.effect_a, diff.effect_b                  # the two Effects

    import_deepspeed()                            # the deepspeed module, its start-up log kept off stdout

Where the truth comes from:
- validation runs DeepSpeed's own ``DeepSpeedConfig`` (and through it the pydantic ZeRO, offload, fp16 and bf16
  models) for the data-parallel world size you give (see zerolab/config/validate.py for how);
- the known top-level keys are the keys DeepSpeedConfig itself looks up (recorded, see known_keys.py);
- the defaults shown by ``explain_config`` are read from DeepSpeed's models and constants;
- the effect figures are zerolab.engine.memory.estimate and zerolab.engine.comm.traffic for the settings read from the config.

Importing this package imports neither torch nor deepspeed; the functions import deepspeed when first called
(about 1.5-2 s on a 2-core CPU) and never start torch.distributed.

May import: zerolab.engine, zerolab.base and zerolab.errors.
"""
from zerolab.config.load import load_config
from zerolab.config.findings import Finding, Report
from zerolab.config.check import check_config
from zerolab.config.explain import Explanation, explain_config
from zerolab.config.effect import Effect, Settings, config_effect, read_settings
from zerolab.config.compare import Comparison, compare_configs, changed_fields
from zerolab.config.deepspeed_import import import_deepspeed

__all__ = ["load_config", "check_config", "explain_config", "config_effect", "compare_configs", "read_settings",
           "changed_fields", "import_deepspeed", "Finding", "Report", "Explanation", "Effect", "Settings", "Comparison"]
