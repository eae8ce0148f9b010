"""What each ds_config field does, in plain words, and what a chosen value means.

The words are zerolab's; the defaults shown next to them come from DeepSpeed (defaults.py). Paths not in
NOTES fall back to a generic line that still gives DeepSpeed's default.
"""
from zerolab.base.i18n import tr
from zerolab.engine.units import format_bytes

_STAGES = {0: "no ZeRO: every GPU keeps all parameters, gradients and optimizer states (plain data parallel)",  # claim: zero-stages-partition-states-then-parameters
           1: "ZeRO-1: optimizer states (fp32 master weights, Adam moments) are partitioned across GPUs",  # claim: zero-stages-partition-states-then-parameters
           2: "ZeRO-2: optimizer states and gradients are partitioned; parameters stay replicated",  # claim: zero-stages-partition-states-then-parameters # claim: zero2-keeps-only-the-gradient-partition
           3: "ZeRO-3: parameters too are partitioned and gathered layer by layer when needed"}  # claim: zero-stages-partition-states-then-parameters # claim: zero3-gathers-parameters-module-by-module
_DEVICES = {"none": "on the GPU", "cpu": "in host RAM", "nvme": "on NVMe, through host buffers (ZeRO-Infinity, stage 3)"}  # claim: nvme-optimizer-offload-below-stage-3-is-cpu-offload


def _elements(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:,.0f} elements = {format_bytes(2 * value, 'GB')} as 16-bit, {format_bytes(4 * value, 'GB')} as fp32"
    return None


def _on_off(on, off):
    return lambda v: on if v is True else off if v is False else None


NOTES = {
    # claim: batch-term-derived-by-floor-division
    "train_batch_size": ("samples per optimizer step over all GPUs = micro batch x accumulation steps x data-parallel "
                         "GPUs", lambda v: f"{v} samples per optimizer step"),
    "train_micro_batch_size_per_gpu": ("samples one GPU processes per forward/backward",  # claim: micro-batch-is-the-dataloader-batch
                                       lambda v: f"{v} samples per GPU per micro-step"),
    "gradient_accumulation_steps": ("micro-steps whose gradients add up before one optimizer step",  # claim: accumulation-steps-make-one-optimizer-step
                                    lambda v: f"{v} micro-steps per optimizer step"),
    "gradient_clipping": ("clip the global gradient norm to this value before the step (0 = off)",  # claim: deepspeed-clips-gradients-by-default
                          lambda v: "off" if v == 0 else f"norm clipped to {v}"),
    "steps_per_print": ("print progress every N steps", None),  # claim: steps-per-print-reports-every-n-steps
    "wall_clock_breakdown": ("time forward, backward and step separately (slows training a little)", None),  # claim: wall-clock-breakdown-times-forward-backward-step
    "optimizer": ("the optimizer DeepSpeed builds (under optimizer offload Adam/AdamW become DeepSpeedCPUAdam)", None),  # claim: offload-builds-deepspeed-cpu-adam
    "optimizer.type": ("optimizer name", lambda v: f"{v}" + (" (CPU Adam when offloading)" if str(v).lower() in ("adam", "adamw") else "")  # claim: offload-builds-deepspeed-cpu-adam
                       + (" (one momentum in the training dtype for the 2-D matrices but the embeddings and the output head, Adam for the rest; stage 3 needs zero_optimization.reduce_scatter false)"  # claim: muon-steps-2d-parameters-but-embeddings-and-head # claim: muon-momentum-in-the-gradient-dtype # claim: muon-at-stage-3-needs-reduce-scatter-off
                          if str(v).lower() == "muon" else "")),
    "optimizer.params.lr": ("learning rate", None),  # claim: optimizer-params-reach-the-adam
    "optimizer.params.betas": ("Adam's decay rates for the first and second moments", None),  # claim: optimizer-params-reach-the-adam
    "optimizer.params.eps": ("Adam's epsilon, added to the denominator for stability", None),  # claim: optimizer-params-reach-the-adam
    "optimizer.params.weight_decay": ("weight decay (decoupled, as in AdamW, for DeepSpeed's Adam too unless adam_w_mode is false)", None),  # claim: deepspeed-adam-decouples-weight-decay
    "scheduler": ("learning-rate schedule DeepSpeed steps with the optimizer", None),  # claim: scheduler-steps-with-the-optimizer
    "fp16.enabled": ("train in fp16 mixed precision with loss scaling (V100, T4 and older GPUs)",  # claim: fp16-loss-scale-zero-is-dynamic
                     _on_off("16-bit parameters and gradients, fp32 master weights", "fp16 off")),
    "fp16.loss_scale": ("fixed loss scale; 0 means dynamic loss scaling",  # claim: fp16-loss-scale-zero-is-dynamic
                        lambda v: "dynamic loss scaling" if v == 0 else f"static loss scale {v}"),
    "fp16.initial_scale_power": ("dynamic scaling starts at 2**N",  # claim: fp16-scale-starts-at-2-to-the-initial-scale-power
                                 lambda v: f"starts at 2**{v} = {2 ** v}" if isinstance(v, int) else None),
    "fp16.loss_scale_window": ("clean steps before the dynamic scale doubles", None),  # claim: fp16-scale-doubles-after-the-window
    "fp16.hysteresis": ("the dynamic scale is halved at the N-th overflow (earlier ones only skip their step), then "  # claim: fp16-hysteresis-then-halving-to-the-floor
                        "at every overflow until a window of clean steps refills the count", None),
    "fp16.min_loss_scale": ("the scale never goes below this; an overflow at this scale stops the run", None),  # claim: fp16-overflow-at-min-scale-stops-the-run
    "bf16.enabled": ("train in bf16 mixed precision (Ampere or newer); no loss scaling needed",  # claim: bf16-trains-without-loss-scaling
                     _on_off("16-bit bf16 parameters and gradients", "bf16 off")),  # claim: bf16-trains-without-loss-scaling
    "bf16.bf16_master_weights_and_grads": (
        # claim: bf16-master-and-moments-make-k-6 # claim: bf16-master-options-need-zero-and-each-other
        "keep the master weights and the gradients the optimizer reads in bf16 instead of fp32 (ZeRO stages 1-3)",
        # claim: bf16-master-and-moments-make-k-6 # claim: bf16-master-weights-need-cpu-adam
        _on_off("bf16 master weights: 2 bytes a parameter instead of 4; with fp32 optimizer states DeepSpeed needs "
                "the optimizer offloaded to its CPU Adam", "fp32 master weights")),
    "bf16.bf16_optimizer_states": (
        "keep Adam's two moments in bf16 instead of fp32 (needs bf16_master_weights_and_grads)",  # claim: bf16-master-options-need-zero-and-each-other
        _on_off("bf16 Adam moments: 4 bytes a parameter instead of 8", "fp32 Adam moments")),  # claim: bf16-master-and-moments-make-k-6
    "zero_optimization": ("the ZeRO block: what is partitioned across data-parallel GPUs, and what is offloaded", None),
    "zero_optimization.stage": ("how much model state ZeRO partitions", lambda v: _STAGES.get(v)),
    # claim: overlap-comm-second-bucket-at-stages-1-2
    "zero_optimization.overlap_comm": ("overlap gradient reduction with the backward pass (costs a second bucket "
                                       "buffer)", _on_off("reduction runs during backward", "backward waits for each reduction")),  # claim: overlap-comm-reduces-on-a-side-stream-during-backward # claim: zero3-overlap-comm-uses-side-streams
    "zero_optimization.contiguous_gradients": ("copy gradients into one contiguous buffer as they are produced "  # claim: contiguous-gradients-copy-into-the-bucket
                                               "(less fragmentation)", None),
    # claim: reduce-scatter-flag-by-stage
    "zero_optimization.reduce_scatter": ("true reduces each rank's share of the gradients for it: a reduce-scatter at "
                                         "stage 3; at stages 1-2 (with contiguous_gradients) an all-reduce of the bucket "
                                         "while use_multi_rank_bucket_allreduce is true, its default, else a reduce to "
                                         "each owner. false all-reduces whole buckets", None),
    "zero_optimization.reduce_bucket_size": ("elements reduced per gradient bucket", _elements),  # claim: bucket-sizes-count-elements
    "zero_optimization.allgather_bucket_size": ("elements per all-gather of updated parameters (stage 1/2), used only where torch lacks all_gather_into_tensor", _elements),  # claim: allgather-settings-unused
    "zero_optimization.allgather_partitions": ("read but unused by DeepSpeed 0.19.8: stages 1-2 always all-gather the "  # claim: allgather-settings-unused
                                               "updated partitions", None),
    "zero_optimization.round_robin_gradients": ("spread gradient copies to the CPU over ranks (stage 1/2 offload)", None),  # claim: round-robin-gradients-interleaves-owners
    "zero_optimization.offload_optimizer": ("where the optimizer state (fp32 master, Adam moments) lives", None),
    "zero_optimization.offload_optimizer.device": ("optimizer state location", lambda v: f"optimizer state {_DEVICES.get(v, '?')}"
                                                   + (" (updated there by DeepSpeedCPUAdam)" if v in ("cpu", "nvme") else "")),  # claim: offload-builds-deepspeed-cpu-adam
    "zero_optimization.offload_optimizer.pin_memory": ("page-lock the host buffers: faster PCIe copies, RAM that cannot "
                                                       "be swapped", None),
    "zero_optimization.offload_optimizer.nvme_path": ("directory on the NVMe drive used for swapping", None),  # claim: nvme-path-holds-the-swap-folder
    "zero_optimization.offload_param": ("where the 16-bit parameters live between uses (stage 3 only)", None),  # claim: offload-param-ignored-below-stage-3
    "zero_optimization.offload_param.device": ("parameter location", lambda v: f"parameters {_DEVICES.get(v, '?')}"),
    "zero_optimization.offload_param.pin_memory": ("page-lock the host parameter buffers", None),
    "zero_optimization.offload_param.nvme_path": ("directory on the NVMe drive used for parameter swapping", None),  # claim: nvme-path-holds-the-swap-folder
    "zero_optimization.stage3_prefetch_bucket_size": ("elements of parameters fetched ahead (stage 3)", _elements),  # claim: zero3-prefetches-along-the-recorded-trace
    "zero_optimization.stage3_param_persistence_threshold": ("parameters of at most this many elements stay "  # claim: stage3-small-parameters-stay-whole
                                                             "unpartitioned (stage 3)", None),
    "zero_optimization.stage3_max_live_parameters": ("upper bound of gathered parameters kept on the GPU (stage 3)", None),  # claim: stage3-max-live-parameters-caps-gathered
    "zero_optimization.stage3_max_reuse_distance": ("keep a gathered parameter if it is reused within this many "  # claim: zero3-reuse-distance-keeps-parameters-gathered
                                                    "parameters (stage 3)", None),
    "zero_optimization.stage3_gather_16bit_weights_on_model_save": ("gather the full 16-bit model in save_16bit_model "  # claim: zero3-state-dict-holds-placeholders
                                                                    "(stage 3; save_checkpoint is unchanged)", None),
    "zero_optimization.zenflow": ("ZenFlow, DeepSpeed's stall-free ZeRO-Offload: stages 1-2 with the optimizer offloaded "  # claim: zenflow-needs-cpu-offload
                                  "to the CPU and stepped by DeepSpeed's CPU Adam (not torch_adam)", None),  # claim: zenflow-refuses-torch-adam
    "zero_optimization.zenflow.topk_ratio": ("share of the gradient columns ZenFlow treats as important and updates "
                                             "at once; the rest are accumulated and applied later (0 < ratio < 1)", None),
    "zero_optimization.zenflow.select_strategy": ("when ZenFlow picks the important columns again: auto, step or epoch "  # claim: zenflow-select-interval-rules
                                                  "(auto takes no select_interval)", None),
    "zero_optimization.zenflow.select_interval": ("steps or epochs between two picks: a number with step or epoch, "  # claim: zenflow-select-interval-rules
                                                  "left out with auto", None),
    "zero_optimization.zenflow.update_interval": ("steps between two applications of the less important gradients "  # claim: zenflow-select-interval-rules
                                                  "(auto, or a number no larger than a step select_interval)", None),
    "zero_optimization.zenflow.overlap_step": ("run the CPU optimizer step while the next forward and backward run",
                                               None),
    "zero_optimization.zenflow.offload": ("keep the important columns' optimizer states in host RAM too (needs "  # claim: zenflow-offload-needs-overlap-comm
                                          "zero_optimization.overlap_comm true)", None),
    "zero_optimization.zenflow.auto_ratio": ("with update_interval auto, the threshold ZenFlow uses to decide when to "
                                             "apply the accumulated gradients", None),
    "zero_optimization.zenflow.full_warm_up_rounds": ("first rounds in which every gradient is applied at once, "
                                                      "before ZenFlow starts picking columns", None),
    "zero_optimization.zenflow.pt_reserved_cores_perc": ("share of the CPU cores left to PyTorch's threads; ZenFlow's "
                                                         "optimizer workers take the rest", None),
    "zero_optimization.offload_optimizer.super_offload": ("SuperOffload, DeepSpeed's offload for Superchips (GH200, "  # claim: super-offload-ignored-below-stage-3
                                                          "GB200, MI300A): read at stage 3 only", None),
    "zero_optimization.offload_optimizer.cpuadam_cores_perc": ("share of the CPU cores SuperOffload's CPU Adam uses "
                                                               "(stage 3 with super_offload)", None),
    "zero_optimization.zero_quantized_weights": ("ZeRO++ qwZ: the stage-3 parameter all-gather sends quantized "  # claim: zero-plus-plus-ignored-below-stage-3
                                                 "weights (read at stage 3 only)", None),
    "zero_optimization.zero_quantized_nontrainable_weights": ("ZeRO++: frozen parameters are kept and gathered "  # claim: zero-plus-plus-ignored-below-stage-3
                                                              "quantized (read at stage 3 only)", None),
    "zero_optimization.zero_quantized_gradients": ("ZeRO++ qgZ: the stage-3 gradient reduction sends quantized "  # claim: zero-plus-plus-ignored-below-stage-3
                                                   "gradients (read at stage 3 only)", None),
    "zero_optimization.zero_hpz_partition_size": ("ZeRO++ hpZ: ranks in the group that keeps a second copy of the "  # claim: zero-plus-plus-ignored-below-stage-3
                                                  "parameters, so that the backward all-gather stays in it; 1 = off, "
                                                  "ideally the GPUs of one node (read at stage 3 only)", None),
    "tensor_parallel.autotp_size": ("AutoTP: ranks each layer's weights are split across (tensor parallelism beside "
                                    "ZeRO's data parallelism)", None),
    "zero_optimization.sub_group_size": ("tile size (elements) of the stage 3 optimizer step, with or without offload", None),  # claim: stage3-sub-group-size-tiles-the-step
}


def describe(path, value, config):
    """'what it does; the chosen value means ...' for one field."""
    what, meaning = NOTES.get(path, (None, None))
    if what is None:
        what = "a DeepSpeed setting zerolab has no description for yet; see deepspeed.ai/docs/config-json"
    said = meaning(value) if meaning else None
    if value == "auto":
        said = '"auto": filled in by the Hugging Face Trainer / Accelerate only'  # claim: hf-trainer-fills-auto
    # the English words above are catalog keys (zerolab/base/locale/zh/zerolab.json); named fields keep the templates closed
    return tr("{what}; here: {said}").format(what=tr(what), said=tr(said)) if said else tr(what)
