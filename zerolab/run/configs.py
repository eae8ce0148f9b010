"""The ds_config a run trains under: built from a few knobs, or read back into those knobs for the prediction."""
from zerolab.errors import UserError
from zerolab.engine.memory import DEVICES, STAGES


def default_precision(device):
    """fp16 on a GPU; bf16 on CPU ranks.

    DeepSpeed's CPU accelerator supports bf16 always and fp16 only where oneDNN has fp16 kernels
    (torch.ops.mkldnn._is_mkldnn_fp16_supported()); bf16 ZeRO runs train on CPU ranks over gloo (the loss
    falls at every stage, with and without offload), so bf16 is the mixed precision to measure on CPU.
    """
    return "fp16" if device == "cuda" else "bf16"


def make_config(stage=2, offload_optimizer="none", offload_param="none", precision="bf16", micro_batch=4,
                accumulation=1, lr=3e-3, master="fp32", moments="fp32", optimizer="adamw"):
    """A ds_config for the tiny GPT.

    ``torch_adam`` (when nothing is offloaded) keeps DeepSpeed from compiling its FusedAdam op: torch's Adam
    holds the same exp_avg and exp_avg_sq; Muon reads it too, for the Adam that steps what Muon does not. With
    optimizer offload DeepSpeed swaps in its own CPU Adam, as it would in a real job. ``stage3_param_persistence_threshold: 0`` partitions every parameter: the
    default (1e5 elements) would keep all of the tiny model's parameters whole on every rank. ``optimizer="muon"``
    asks for DeepSpeed's Muon (Adam for the parameters it does not step), with reduce_scatter off at stage 3, which
    DeepSpeed needs.
    """
    adam = {"lr": lr}
    if offload_optimizer == "none":
        adam["torch_adam"] = True  # claim: muon-aux-adam-follows-torch-adam
    zero = {"stage": stage}
    if offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": offload_optimizer, "pin_memory": False}
    if offload_param != "none":
        zero["offload_param"] = {"device": offload_param, "pin_memory": False}
    if stage == 3:
        zero["stage3_param_persistence_threshold"] = 0
    block = {"type": "AdamW", "params": adam}
    if optimizer == "muon":
        block = {"type": "Muon", "params": adam}
        if stage == 3:
            zero["reduce_scatter"] = False  # "Muon and reduce scatter cannot be used together"
    config = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": accumulation,
        "optimizer": block,
        "zero_optimization": zero,
        "steps_per_print": 10**9,
    }
    if precision in ("fp16", "bf16"):
        config[precision] = {"enabled": True}
    if master == "bf16":  # DeepSpeed 0.18.3+: bf16 master weights and gradients, and bf16 Adam moments
        config["bf16"].update(bf16_master_weights_and_grads=True, bf16_optimizer_states=moments == "bf16")
    return config


def update_rule(config):
    """"muon" when the config asks DeepSpeed for its Muon optimizer, else "adamw"."""
    optimizer = config.get("optimizer") if isinstance(config.get("optimizer"), dict) else {}
    return "muon" if str(optimizer.get("type", "")).lower() == "muon" else "adamw"


def describe(config):
    """(stage, offload_optimizer, offload_param, precision) of a ds_config dict, checked enough to predict it."""
    if not isinstance(config, dict):
        raise UserError("the DeepSpeed config must be a JSON object (a dict), e.g. {\"zero_optimization\": {...}}")
    zero = config.get("zero_optimization") or {}
    if not isinstance(zero, dict):
        raise UserError("zero_optimization must be an object with a 'stage' field")
    stage = zero.get("stage", 0)
    if stage not in STAGES:
        raise UserError(f"zero_optimization.stage must be 0, 1, 2 or 3, got {stage!r}")
    devices = []
    for key in ("offload_optimizer", "offload_param"):
        device = (zero.get(key) or {}).get("device", "none")
        if device not in DEVICES:
            raise UserError(f"zero_optimization.{key}.device must be one of {', '.join(DEVICES)}, got {device!r}")
        devices.append(device)
    offload_optimizer, offload_param = devices
    if stage < 3:
        offload_param = "none"  # DeepSpeed never passes offload_param to the stage 0-2 optimizer
        if stage == 0 or offload_optimizer == "nvme":
            offload_optimizer = "none"  # stage 0 has no ZeRO optimizer; NVMe below stage 3 is treated as none
    if offload_optimizer == "nvme" or offload_param == "nvme":
        raise UserError("NVMe offload is not measured by zerolab run: use device 'cpu' or 'none'")
    enabled = [name for name in ("fp16", "bf16") if (config.get(name) or {}).get("enabled") is True]
    if len(enabled) > 1:
        raise UserError("fp16 and bf16 cannot both be enabled: pick one")
    for key in ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"):
        if config.get(key) == "auto":
            raise UserError(f"{key} is \"auto\", which only Hugging Face fills in: give a number")
    return stage, offload_optimizer, offload_param, (enabled[0] if enabled else "fp32")
