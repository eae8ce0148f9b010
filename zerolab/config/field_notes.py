"""What each ds_config field does, in plain words, and what a chosen value means.

The words are zerolab's; the defaults shown next to them come from DeepSpeed (defaults.py). Paths not in
NOTES fall back to a generic line that still gives DeepSpeed's default.
"""
from zerolab.base.i18n import tr
from zerolab.engine.units import format_bytes

_STAGES = {0: "no ZeRO: every GPU keeps all parameters, gradients and optimizer states (plain data parallel)",
           1: "ZeRO-1: optimizer states (fp32 master weights, Adam moments) are partitioned across GPUs",
           2: "ZeRO-2: optimizer states and gradients are partitioned; parameters stay replicated",
           3: "ZeRO-3: parameters too are partitioned and gathered layer by layer when needed"}
_DEVICES = {"none": "on the GPU", "cpu": "in host RAM", "nvme": "on NVMe, through host buffers (ZeRO-Infinity, stage 3)"}


def _elements(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:,.0f} elements = {format_bytes(2 * value, 'GB')} as 16-bit, {format_bytes(4 * value, 'GB')} as fp32"
    return None


def _on_off(on, off):
    return lambda v: on if v is True else off if v is False else None


NOTES = {
    "train_batch_size": ("samples per optimizer step over all GPUs = micro batch x accumulation steps x data-parallel "
                         "GPUs", lambda v: f"{v} samples per optimizer step"),
    "train_micro_batch_size_per_gpu": ("samples one GPU processes per forward/backward",
                                       lambda v: f"{v} samples per GPU per micro-step"),
    "gradient_accumulation_steps": ("micro-steps whose gradients add up before one optimizer step",
                                    lambda v: f"{v} micro-steps per optimizer step"),
    "gradient_clipping": ("clip the global gradient norm to this value before the step (0 = off)",
                          lambda v: "off" if v == 0 else f"norm clipped to {v}"),
    "steps_per_print": ("print progress every N steps", None),
    "wall_clock_breakdown": ("time forward, backward and step separately (slows training a little)", None),
    "optimizer": ("the optimizer DeepSpeed builds (under optimizer offload Adam/AdamW become DeepSpeedCPUAdam)", None),
    "optimizer.type": ("optimizer name", lambda v: f"{v}" + (" (CPU Adam when offloading)" if str(v).lower() in ("adam", "adamw") else "")),
    "optimizer.params.lr": ("learning rate", None),
    "optimizer.params.betas": ("Adam's decay rates for the first and second moments", None),
    "optimizer.params.eps": ("Adam's epsilon, added to the denominator for stability", None),
    "optimizer.params.weight_decay": ("weight decay (decoupled in AdamW)", None),
    "scheduler": ("learning-rate schedule DeepSpeed steps with the optimizer", None),
    "fp16.enabled": ("train in fp16 mixed precision with loss scaling (V100, T4 and older GPUs)",
                     _on_off("16-bit parameters and gradients, fp32 master weights", "fp16 off")),
    "fp16.loss_scale": ("fixed loss scale; 0 means dynamic loss scaling",
                        lambda v: "dynamic loss scaling" if v == 0 else f"static loss scale {v}"),
    "fp16.initial_scale_power": ("dynamic scaling starts at 2**N",
                                 lambda v: f"starts at 2**{v} = {2 ** v}" if isinstance(v, int) else None),
    "fp16.loss_scale_window": ("clean steps before the dynamic scale doubles", None),
    "fp16.hysteresis": ("overflows tolerated before the scale is halved", None),
    "fp16.min_loss_scale": ("the scale never goes below this; reaching it stops the run", None),
    "bf16.enabled": ("train in bf16 mixed precision (Ampere or newer); no loss scaling needed",
                     _on_off("16-bit bf16 parameters and gradients", "bf16 off")),
    "bf16.bf16_master_weights_and_grads": (
        "keep the master weights and the gradients the optimizer reads in bf16 instead of fp32 (ZeRO stages 1-3)",
        _on_off("bf16 master weights: 2 bytes a parameter instead of 4; with fp32 optimizer states DeepSpeed needs "
                "the optimizer offloaded to its CPU Adam", "fp32 master weights")),
    "bf16.bf16_optimizer_states": (
        "keep Adam's two moments in bf16 instead of fp32 (needs bf16_master_weights_and_grads)",
        _on_off("bf16 Adam moments: 4 bytes a parameter instead of 8", "fp32 Adam moments")),
    "zero_optimization": ("the ZeRO block: what is partitioned across data-parallel GPUs, and what is offloaded", None),
    "zero_optimization.stage": ("how much model state ZeRO partitions", lambda v: _STAGES.get(v)),
    "zero_optimization.overlap_comm": ("overlap gradient reduction with the backward pass (costs a second bucket "
                                       "buffer)", _on_off("reduction runs during backward", "reduction waits")),
    "zero_optimization.contiguous_gradients": ("copy gradients into one contiguous buffer as they are produced "
                                               "(less fragmentation)", None),
    "zero_optimization.reduce_scatter": ("reduce gradients with reduce-scatter instead of all-reduce", None),
    "zero_optimization.reduce_bucket_size": ("elements reduced per gradient bucket", _elements),
    "zero_optimization.allgather_bucket_size": ("elements per all-gather of updated parameters (stage 1/2), used only where torch lacks all_gather_into_tensor", _elements),
    "zero_optimization.allgather_partitions": ("gather updated partitions with all-gather instead of broadcasts", None),
    "zero_optimization.round_robin_gradients": ("spread gradient copies to the CPU over ranks (stage 1/2 offload)", None),
    "zero_optimization.offload_optimizer": ("where the optimizer state (fp32 master, Adam moments) lives", None),
    "zero_optimization.offload_optimizer.device": ("optimizer state location", lambda v: f"optimizer state {_DEVICES.get(v, '?')}"
                                                   + (" (updated there by DeepSpeedCPUAdam)" if v in ("cpu", "nvme") else "")),
    "zero_optimization.offload_optimizer.pin_memory": ("page-lock the host buffers: faster PCIe copies, RAM that cannot "
                                                       "be swapped", None),
    "zero_optimization.offload_optimizer.nvme_path": ("directory on the NVMe drive used for swapping", None),
    "zero_optimization.offload_param": ("where the 16-bit parameters live between uses (stage 3 only)", None),
    "zero_optimization.offload_param.device": ("parameter location", lambda v: f"parameters {_DEVICES.get(v, '?')}"),
    "zero_optimization.offload_param.pin_memory": ("page-lock the host parameter buffers", None),
    "zero_optimization.offload_param.nvme_path": ("directory on the NVMe drive used for parameter swapping", None),
    "zero_optimization.stage3_prefetch_bucket_size": ("elements of parameters fetched ahead (stage 3)", _elements),
    "zero_optimization.stage3_param_persistence_threshold": ("parameters smaller than this stay unpartitioned "
                                                             "(stage 3)", None),
    "zero_optimization.stage3_max_live_parameters": ("upper bound of gathered parameters kept on the GPU (stage 3)", None),
    "zero_optimization.stage3_max_reuse_distance": ("keep a gathered parameter if it is reused within this many "
                                                    "parameters (stage 3)", None),
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": ("gather the full 16-bit model when saving "
                                                                    "(stage 3)", None),
    "zero_optimization.sub_group_size": ("tile size of the optimizer step under stage 3 offload", None),
}


def describe(path, value, config):
    """'what it does; the chosen value means ...' for one field."""
    what, meaning = NOTES.get(path, (None, None))
    if what is None:
        what = "a DeepSpeed setting zerolab has no description for yet; see deepspeed.ai/docs/config-json"
    said = meaning(value) if meaning else None
    if value == "auto":
        said = '"auto": filled in by the Hugging Face Trainer / Accelerate only'
    # the English words above are catalog keys (zerolab/base/locale/zh/zerolab.json); named fields keep the templates closed
    return tr("{what}; here: {said}").format(what=tr(what), said=tr(said)) if said else tr(what)
