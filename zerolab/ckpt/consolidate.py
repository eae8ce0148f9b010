"""One state dict from a ZeRO checkpoint: a front to DeepSpeed's own deepspeed.utils.zero_to_fp32.

    from zerolab.ckpt.consolidate import consolidate
    written = consolidate("checkpoints/", "model_out/", dtype="bf16", safetensors=True)

It checks the folder first (zerolab.ckpt.inspect: a missing rank or a truncated file gets one clear message
instead of a traceback from deep inside DeepSpeed), says what it is doing, and lets
``convert_zero_checkpoint_to_state_dict`` do the merging, so the result is exactly DeepSpeed's.
"""
import os
import sys
import time

from zerolab.ckpt.inspect import CheckpointError, _size, inspect_checkpoint

DTYPES = ("fp32", "bf16", "fp16")


def consolidate(checkpoint_dir, output_dir, dtype="fp32", safetensors=False, tag=None, max_shard_size="5GB",
                stream=sys.stderr):
    """Write the consolidated weights into ``output_dir``; return the paths written."""
    if dtype not in DTYPES:
        raise CheckpointError(f"unknown dtype {dtype!r}: use one of {', '.join(DTYPES)}")
    checkpoint = inspect_checkpoint(checkpoint_dir, tag)
    if checkpoint.universal:
        raise CheckpointError("a universal checkpoint is not consolidated: load it with "
                              '"checkpoint": {"load_universal": true}, or consolidate the ZeRO checkpoint it was '
                              "converted from")
    if checkpoint.stage == 0:
        # claim: model-states-file-holds-module-steps-config # claim: stage0-optimizer-in-the-model-states-file
        raise CheckpointError("a stage-0 checkpoint needs no consolidation: its model-states file holds the whole "
                              "weights under 'module' (torch.load(...)['module'])")
    output_dir = os.path.abspath(output_dir)
    inside = os.path.commonpath([output_dir, checkpoint.folder]) == checkpoint.folder
    if inside:
        raise CheckpointError(f"output inside the checkpoint: {output_dir} is in {checkpoint.folder}; write it "
                              "elsewhere so the checkpoint stays as it was saved")
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise CheckpointError(f"output is a file: {output_dir}; give a folder")
    print(f"consolidating ZeRO stage {checkpoint.stage} checkpoint {checkpoint.folder} (tag {checkpoint.tag}, "
          f"{checkpoint.dp_world_size} ranks, {_size(checkpoint.total_bytes)}) to {dtype} with DeepSpeed's "
          "zero_to_fp32", file=stream, flush=True)
    started = time.perf_counter()
    _quiet_deepspeed()
    from deepspeed.utils.zero_to_fp32 import convert_zero_checkpoint_to_state_dict

    before = _listing(output_dir)
    convert_zero_checkpoint_to_state_dict(checkpoint.folder, output_dir, dtype=dtype, max_shard_size=max_shard_size,
                                          safe_serialization=safetensors, tag=checkpoint.tag)
    written = sorted(path for path, stamp in _listing(output_dir).items() if before.get(path) != stamp)
    total = sum(os.path.getsize(path) for path in written)
    print(f"wrote {len(written)} file(s), {_size(total)}, in {time.perf_counter() - started:.1f} s: "
          + ", ".join(os.path.relpath(path, output_dir) for path in written), file=stream, flush=True)
    return written


def _listing(folder):
    if not os.path.isdir(folder):
        return {}
    return {os.path.join(folder, name): os.stat(os.path.join(folder, name)).st_mtime_ns for name in os.listdir(folder)}


# claim: deepspeed-warns-when-it-falls-back-to-cpu
def _quiet_deepspeed():
    """DeepSpeed announces its accelerator on import; on CPU ranks that is the expected one."""
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
