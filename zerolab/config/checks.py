"""What DeepSpeed 0.19.8 silently lets through: each check reads the raw config and returns findings.

Severities: error = DeepSpeed rejects it or it cannot work; warning = accepted but surely not what was meant;
note = correct, but a default worth knowing (shown by the CLI, not part of check's JSON).
Every check takes (config, world_size) and is listed in CHECKS, in report order.
"""
import difflib

from zerolab.config.findings import Finding
from zerolab.engine.config_precision import bf16_block

PRECISION_BLOCKS = ("fp16", "bf16", "bfloat16")
BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")


def zero_block(config):
    zero = config.get("zero_optimization", {})
    if zero is True:  # legacy boolean: DeepSpeed maps it to stage 1  # claim: zero-optimization-true-means-stage-1
        return {"stage": 1}
    return zero if isinstance(zero, dict) else {}


def zero_stage(config):
    """The stage DeepSpeed will use (0 when unset, "auto" or unreadable), as an int."""
    stage = zero_block(config).get("stage", 0)
    return stage if isinstance(stage, int) and not isinstance(stage, bool) and 0 <= stage <= 3 else 0


def _offload(config, name):
    block = zero_block(config).get(name)
    return block if isinstance(block, dict) else None


def unknown_top_level_keys(config, world_size):
    from zerolab.config.known_keys import known_top_level_keys
    known = sorted(known_top_level_keys())
    findings = []
    for key in config:
        if key in known:
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "remove it, or check the spelling against the DeepSpeed docs"
        findings.append(Finding(key, "warning", f"DeepSpeed does not read this key and silently ignores it; {hint}"))  # claim: config-blocks-strict-top-level-loose
    return findings


def removed_features(config, world_size):
    """All removed keys at once (DeepSpeed stops at the first one)."""
    from deepspeed.runtime import config as ds
    found = [Finding(key, "error", f"removed from DeepSpeed: {message}")  # claim: removed-features-raise-pointing-to-issue-8489
             for key, message in ds._REMOVED_TOP_LEVEL_CONFIG_KEYS.items() if key in config]
    zero = zero_block(config)
    found += [Finding(f"zero_optimization.{key}", "error", f"removed from DeepSpeed: {message}")  # claim: removed-features-raise-pointing-to-issue-8489
              for key, message in ds._REMOVED_ZERO_CONFIG_KEYS.items() if key in zero]
    return found


def offload_param_below_stage_3(config, world_size):
    block = _offload(config, "offload_param")
    stage = zero_stage(config)
    if block and block.get("device", "none") not in ("none", "auto") and stage < 3:
        return [Finding("zero_optimization.offload_param", "warning",
                        f"parameter offload works only with stage 3; at stage {stage} DeepSpeed ignores it and "  # claim: offload-param-ignored-below-stage-3
                        "keeps the parameters on the GPU. Set \"stage\": 3 or remove offload_param")]
    return []


def stage3_keys_below_stage_3(config, world_size):
    stage = zero_stage(config)
    if stage == 3:
        return []
    return [Finding(f"zero_optimization.{key}", "warning",
                    f"a stage-3 setting; at stage {stage} DeepSpeed ignores it. Remove it or set \"stage\": 3")  # claim: stage3-keys-ignored-below-stage-3
            for key in zero_block(config) if key.startswith("stage3_")]


def offload_without_zero(config, world_size):
    block = _offload(config, "offload_optimizer")
    if block and block.get("device", "none") in ("cpu", "nvme") and zero_stage(config) == 0:
        return [Finding("zero_optimization.offload_optimizer", "warning",
                        # claim: optimizer-offload-at-stage-0-builds-cpu-adam
                        "optimizer offload needs ZeRO stage 1, 2 or 3; at stage 0 nothing is offloaded, yet DeepSpeed "
                        "still swaps Adam or AdamW (without torch_adam) for its CPU Adam, which refuses parameters on "
                        "the GPU at the first step. Set \"stage\": 2 (the usual choice with CPU offload)")]
    return []


def nvme_without_path(config, world_size):
    findings = []
    for name in ("offload_optimizer", "offload_param"):
        block = _offload(config, name)
        if not block or block.get("device") != "nvme" or block.get("nvme_path"):
            continue
        if name == "offload_optimizer" and zero_stage(config) < 3:
            continue  # below stage 3 nvme is handled by nvme_optimizer_below_stage_3
        if name == "offload_param" and zero_stage(config) < 3:
            continue  # ignored anyway, reported by offload_param_below_stage_3
        findings.append(Finding(f"zero_optimization.{name}.nvme_path", "error",
                                # claim: nvme-without-path-accepted # claim: nvme-without-path-fails-at-start-up
                                "device is \"nvme\" but nvme_path is not set; DeepSpeed accepts the config and then "
                                "fails building the swap folder (os.path.join(None, ...)). Set nvme_path to a "
                                "directory on a fast local NVMe drive, e.g. \"/local_nvme\""))
    return findings


def nvme_optimizer_below_stage_3(config, world_size):
    block = _offload(config, "offload_optimizer")
    stage = zero_stage(config)
    if block and block.get("device") == "nvme" and 1 <= stage < 3:
        return [Finding("zero_optimization.offload_optimizer.device", "warning",
                        # claim: nvme-optimizer-offload-below-stage-3-is-cpu-offload
                        f"NVMe offload is ZeRO-Infinity, stage 3 only. At stage {stage} DeepSpeed offloads to CPU "
                        "RAM instead (stage_1_and_2.py treats every device but \"none\" as CPU offload), so "
                        "host RAM must hold the optimizer state and nvme_path is unused. Write \"cpu\", or use "
                        "stage 3 for NVMe")]
    return []


def auto_values(config, world_size):
    """ "auto" is filled in by the Hugging Face Trainer / Accelerate; DeepSpeed alone drops it inside
    zero_optimization / fp16 / bf16 (the field takes its default) and keeps it as a string elsewhere."""
    findings = []
    for path, value in _leaves(config):
        if value != "auto" or path in BATCH_KEYS:  # batch "auto": DeepSpeed raises, validate reports it  # claim: auto-batch-fields-raise-typeerror
            continue
        top = path.split(".")[0]
        if top in ("zero_optimization", *PRECISION_BLOCKS):
            default = _default_of(path)
            findings.append(Finding(path, "warning",
                                    # claim: hf-trainer-fills-auto # claim: auto-dropped-inside-blocks # claim: auto-dropped-in-precision-blocks
                                    f"\"auto\" is only filled in by the Hugging Face Trainer / Accelerate; DeepSpeed "
                                    f"alone drops it silently and uses the default ({default}). Write the value"))
        else:
            findings.append(Finding(path, "error",
                                    # claim: hf-trainer-fills-auto # claim: auto-kept-as-string-outside-the-blocks
                                    "\"auto\" is only filled in by the Hugging Face Trainer / Accelerate; DeepSpeed "
                                    "alone keeps the string \"auto\" and fails when it uses it. Write the value"))
    return findings


def batch_arithmetic(config, world_size):
    """The floor-division trap: DeepSpeed derives a missing batch field with //, which can leave a remainder."""  # claim: batch-term-derived-by-floor-division
    tbs, mbs, gas = (config.get(k) for k in BATCH_KEYS)
    if not all(v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0) for v in (tbs, mbs, gas)):
        return []
    if tbs is not None and mbs is not None and gas is None and tbs % (mbs * world_size):
        derived = tbs // mbs // world_size
        return [Finding("train_batch_size", "error",
                        f"DeepSpeed derives gradient_accumulation_steps = {tbs} // {mbs} // {world_size} = {derived} "  # claim: batch-term-derived-by-floor-division
                        f"(floor division), and {mbs} x {derived} x {world_size} = {mbs * derived * world_size} != "
                        f"train_batch_size {tbs}. Make train_batch_size a multiple of "
                        f"micro batch x world size ({mbs * world_size})")]
    if tbs is not None and gas is not None and mbs is None and tbs % (gas * world_size):
        derived = tbs // world_size // gas
        return [Finding("train_batch_size", "error",
                        f"DeepSpeed derives train_micro_batch_size_per_gpu = {tbs} // {world_size} // {gas} = "  # claim: batch-term-derived-by-floor-division
                        f"{derived} (floor division), which does not multiply back to {tbs}. Make "
                        f"train_batch_size a multiple of gradient_accumulation_steps x world size "
                        f"({gas * world_size})")]
    return []


def autotp_batch(config, world_size):
    """AutoTP's tensor-parallel ranks share a batch, yet DeepSpeed 0.19.8's batch check counts them."""
    block = config.get("tensor_parallel") if isinstance(config.get("tensor_parallel"), dict) else {}
    size = block.get("autotp_size")
    if not isinstance(size, int) or isinstance(size, bool) or size <= 1:
        return []
    # claim: autotp-batch-counts-every-rank
    return [Finding("tensor_parallel.autotp_size", "note",
                    f"with AutoTP, DeepSpeed 0.19.8 checks train_batch_size = micro batch x accumulation steps x "
                    f"every rank, the {size} tensor-parallel ranks of a group included, although they share one "
                    f"batch; the AutoTP tutorial's train_batch_size (divided by autotp_size) is refused. Give "
                    f"--world-size the number of all ranks")]


def pin_memory_default(config, world_size):
    notes = []
    for name in ("offload_optimizer", "offload_param"):
        block = _offload(config, name)
        if block and block.get("device") in ("cpu", "nvme") and "pin_memory" not in block:
            notes.append(Finding(f"zero_optimization.{name}.pin_memory", "note",
                                 "not set: DeepSpeed 0.19.8 pins the offloaded memory by default (it was false "  # claim: offload-pin-memory-defaults-true
                                 "before). Pinned RAM cannot be swapped; on low-RAM hosts (Colab, WSL) set "
                                 "\"pin_memory\": false if the process is killed with -9"))
    return notes


def overlap_comm_default(config, world_size):
    zero = zero_block(config)
    if zero and "overlap_comm" not in zero:
        stage = zero_stage(config)
        return [Finding("zero_optimization.overlap_comm", "note",
                        f"not set: DeepSpeed picks {stage == 3} for stage {stage} (true only for stage 3; its docs "  # claim: overlap-comm-default-by-stage
                        "table says false). Set it explicitly to say what you mean")]
    return []


def contiguous_gradients_forced(config, world_size):
    zero = zero_block(config)
    block = _offload(config, "offload_optimizer")
    if (zero.get("contiguous_gradients") is False and block and block.get("device") in ("cpu", "nvme")
            and zero_stage(config) in (1, 2)):
        return [Finding("zero_optimization.contiguous_gradients", "warning",
                        "false is ignored under optimizer offload: stage 1/2 force it on "  # claim: offload-forces-contiguous-gradients
                        "(contiguous_gradients or cpu_offload, stage_1_and_2.py). Remove it or set true")]
    return []


def bf16_master_weights_without_cpu_adam(config, world_size):
    """A rule DeepSpeed 0.19.8 enforces only in deepspeed.initialize (base_optimizer._configure_master_weights): bf16
    master weights and gradients need the optimizer offloaded to DeepSpeedCPUAdam, unless bf16_optimizer_states
    keeps the states in bf16 too and nothing is offloaded. The config class accepts the rest (its own rules: stages
    1-3, states only with master weights, are validate's)."""
    block = bf16_block(config)
    if block.get("bf16_master_weights_and_grads") is not True or zero_stage(config) == 0:
        return []
    offload = (_offload(config, "offload_optimizer") or {}).get("device", "none") in ("cpu", "nvme")
    if block.get("bf16_optimizer_states") is True and not offload:
        return []
    optimizer = config.get("optimizer") if isinstance(config.get("optimizer"), dict) else None
    params = optimizer.get("params") if optimizer and isinstance(optimizer.get("params"), dict) else {}
    kind = str(optimizer.get("type", "")).lower() if optimizer else None
    path = f"{'bf16' if isinstance(config.get('bf16'), dict) else 'bfloat16'}.bf16_master_weights_and_grads"
    if not offload:
        # claim: bf16-master-weights-need-cpu-adam
        return [Finding(path, "error", "DeepSpeed 0.19.8 accepts the config, then refuses it in deepspeed.initialize: "
                        "\"Master weights feature requires ZeRO Offload with DeepSpeedCPUAdam\". With fp32 optimizer "
                        "states the bf16 master weights are stepped on the CPU: set "
                        "zero_optimization.offload_optimizer.device to \"cpu\" with an Adam or AdamW optimizer, or "
                        "also set bf16_optimizer_states to true to keep the states in bf16 on the device")]
    if optimizer is None:
        return [Finding(path, "warning", "the optimizer you pass to deepspeed.initialize must be DeepSpeedCPUAdam: "  # claim: bf16-master-weights-need-cpu-adam
                        "with bf16 master weights and optimizer offload, DeepSpeed 0.19.8 refuses any other "
                        "(\"Master weights feature requires ZeRO Offload with DeepSpeedCPUAdam\")")]
    if kind not in ("adam", "adamw") or params.get("torch_adam") is True:
        built = "torch's Adam (torch_adam)" if kind in ("adam", "adamw") else f"the {optimizer.get('type')} optimizer"
        return [Finding(path, "error", f"DeepSpeed 0.19.8 accepts the config, then refuses it in "  # claim: bf16-master-weights-need-cpu-adam
                        f"deepspeed.initialize: \"Master weights feature requires ZeRO Offload with "
                        f"DeepSpeedCPUAdam\". This config builds {built}, not DeepSpeedCPUAdam: use optimizer "
                        f"type Adam or AdamW without torch_adam")]
    return []


def muon(config, world_size):
    """DeepSpeed 0.19.8's Muon: stage 3 refuses it in deepspeed.initialize unless reduce_scatter is false; which
    parameters Muon steps is DeepSpeed's choice, by shape and name, worth a note."""
    optimizer = config.get("optimizer") if isinstance(config.get("optimizer"), dict) else {}
    if str(optimizer.get("type", "")).lower() != "muon":
        return []
    found = []
    if zero_stage(config) == 3 and zero_block(config).get("reduce_scatter", True) is not False:
        # claim: muon-at-stage-3-needs-reduce-scatter-off
        found.append(Finding("zero_optimization.reduce_scatter", "error", "DeepSpeed 0.19.8 accepts the config, "
                             "then refuses it in deepspeed.initialize: \"Muon and reduce scatter cannot be used "
                             "together\". At stage 3 set zero_optimization.reduce_scatter to false (the default is "
                             "true)"))
    # claim: muon-steps-2d-parameters-but-embeddings-and-head
    found.append(Finding("optimizer.type", "note", "Muon steps the 2-D parameters whose names contain neither "
                         "\"embed\" nor \"lm_head\", Adam the rest (embeddings, output head, norms, biases): "
                         "deepspeed.initialize sets param.use_muon on every parameter itself, over your own tags"))
    return found


def zenflow(config, world_size):
    """ZenFlow (zero_optimization.zenflow): rules DeepSpeed 0.19.8 enforces only in deepspeed.initialize, in its engine
    (runtime/zenflow/engine.py configure_zenflow, every stage) and its stage-1/2 optimizer
    (runtime/zenflow/zenflow_stage_1_and_2.py). Its config class checks only the ranges of the fields."""
    block = zero_block(config).get("zenflow")
    if not isinstance(block, dict):
        return []
    path, stage, found = "zero_optimization.zenflow", zero_stage(config), []
    strategy = block.get("select_strategy", "auto")
    select, update = block.get("select_interval", "auto"), block.get("update_interval", "auto")
    number = (lambda value: isinstance(value, int) and not isinstance(value, bool))
    if strategy == "auto" and number(select):
        # claim: zenflow-select-interval-rules
        found.append(Finding(f"{path}.select_interval", "error",
                             "DeepSpeed 0.19.8 accepts the config, then refuses it in deepspeed.initialize: \"If use "
                             "auto select strategy, select_interval will be set to 1 ...\" (raised, not warned). "
                             "Remove select_interval, or set select_strategy to \"step\" or \"epoch\""))
    if strategy in ("step", "epoch") and select == "auto":
        # claim: zenflow-select-interval-rules
        found.append(Finding(f"{path}.select_interval", "error",
                             "DeepSpeed 0.19.8 accepts the config, then refuses it in deepspeed.initialize: \"If "
                             f"don't use auto select strategy, select_interval must be a number.\" With "
                             f"select_strategy \"{strategy}\" give select_interval as a number of steps or epochs"))
    if strategy == "step" and number(select) and number(update) and select < update:
        # claim: zenflow-select-interval-rules
        found.append(Finding(f"{path}.select_interval", "error",
                             "DeepSpeed 0.19.8 accepts the config, then refuses it in deepspeed.initialize: "
                             f"\"Select interval must be greater or equal to update interval\" ({select} < {update}). "
                             "Raise select_interval or lower update_interval"))
    if stage not in (1, 2):
        return found
    if (_offload(config, "offload_optimizer") or {}).get("device", "none") != "cpu":
        # claim: zenflow-needs-cpu-offload
        found.append(Finding(path, "error", "DeepSpeed 0.19.8 accepts the config, then refuses it in "
                             "deepspeed.initialize: \"Zenflow must be used with cpu offload\". ZenFlow is an add-on "
                             "to ZeRO-Offload: set zero_optimization.offload_optimizer.device to \"cpu\""))
        return found
    optimizer = config.get("optimizer") if isinstance(config.get("optimizer"), dict) else {}
    params = optimizer.get("params") if isinstance(optimizer.get("params"), dict) else {}
    if params.get("torch_adam") is True:
        # claim: zenflow-refuses-torch-adam
        found.append(Finding("optimizer.params.torch_adam", "error", "DeepSpeed 0.19.8 accepts the config, then "
                             "refuses it in deepspeed.initialize: ZenFlow hands the optimizer's params to its own "
                             "AdamW, which fails with \"TypeError: AdamW.__init__() got an unexpected keyword argument "
                             "'torch_adam'\". Remove torch_adam: ZenFlow steps with DeepSpeed's CPU Adam"))
    if block.get("offload") is True and zero_block(config).get("overlap_comm") is not True:
        # claim: zenflow-offload-needs-overlap-comm
        found.append(Finding(f"{path}.offload", "error", "DeepSpeed 0.19.8 accepts the config, then refuses it in "
                             "deepspeed.initialize: \"offload selective optimizer should be used with overlap_comm\". "
                             "Set zero_optimization.overlap_comm to true (its default is false at stages 1-2), or "
                             "zenflow.offload to false"))
    return found


ZERO_PLUS_PLUS = ("zero_quantized_weights", "zero_quantized_nontrainable_weights", "zero_quantized_gradients")


def stage3_only_offload_and_zero_plus_plus(config, world_size):
    """Keys DeepSpeed 0.19.8 reads only in its stage-3 optimizer (runtime/engine.py _configure_zero_optimizer): below
    stage 3 its config class accepts them and deepspeed.initialize builds the stage-1/2 optimizer without them."""
    stage = zero_stage(config)
    if stage == 3:
        return []
    zero, found = zero_block(config), []
    offload = _offload(config, "offload_optimizer") or {}
    if offload.get("super_offload") is True:
        # claim: super-offload-ignored-below-stage-3
        found.append(Finding("zero_optimization.offload_optimizer.super_offload", "warning",
                             f"SuperOffload works only with stage 3; at stage {stage} DeepSpeed ignores it and "
                             "builds its ordinary stage-1/2 optimizer. Set \"stage\": 3 or remove super_offload"))
    switched_on = [key for key in ZERO_PLUS_PLUS if zero.get(key) is True]
    hpz = zero.get("zero_hpz_partition_size")
    if isinstance(hpz, int) and not isinstance(hpz, bool) and hpz > 1:
        switched_on.append("zero_hpz_partition_size")
    for key in switched_on:
        # claim: zero-plus-plus-ignored-below-stage-3
        found.append(Finding(f"zero_optimization.{key}", "warning",
                             f"a ZeRO++ setting (qwZ, hpZ, qgZ), read only by the stage-3 optimizer; at stage {stage} "
                             "DeepSpeed ignores it and sends what plain ZeRO sends. Set \"stage\": 3 or remove it"))
    return found


CHECKS = (removed_features, unknown_top_level_keys, batch_arithmetic, auto_values, offload_without_zero,
          offload_param_below_stage_3, nvme_optimizer_below_stage_3, nvme_without_path, stage3_keys_below_stage_3,
          contiguous_gradients_forced, bf16_master_weights_without_cpu_adam, muon, zenflow,
          stage3_only_offload_and_zero_plus_plus, autotp_batch, pin_memory_default, overlap_comm_default)


def _leaves(value, prefix=""):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(inner, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, value


def _default_of(path):
    from zerolab.config.defaults import default_of
    default = default_of(path)
    return "unknown" if default is None else f"{path.split('.')[-1]} = {default}"
