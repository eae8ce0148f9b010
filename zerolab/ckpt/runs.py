"""Real DeepSpeed checkpoint jobs of the tiny GPT on CPU ranks: train and save, or load (resume) and go on.

    from zerolab.ckpt.runs import save_run, resume_run, checkpoint_config
    saved = save_run(checkpoint_config(stage=2), "ck", ranks=2, steps=2)
    resumed = resume_run(checkpoint_config(stage=2, load_universal=True), "uni", ranks=3, steps=1)

Each returns one result per rank: ``loaded`` (after load_checkpoint) and ``final`` (after the steps), each with
global_steps, optimizer_step and the parameters. Every rank is stopped whatever happens (zerolab.run.launch).
"""
from zerolab.run.configs import make_config
from zerolab.run.model import ModelSpec

SMALL = ModelSpec(layers=1, width=32, heads=2, vocab=64, seq_len=16)


def checkpoint_config(stage=2, precision="bf16", gather_16bit=False, load_universal=False, micro_batch=2):
    """make_config's ds_config, plus the checkpoint knobs this lesson turns."""
    config = make_config(stage=stage, precision=precision, micro_batch=micro_batch)
    if gather_16bit:
        config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
    if load_universal:
        config["checkpoint"] = {"load_universal": True}
    return config


def save_run(config, save_dir, ranks=2, steps=2, model=SMALL, tag=None, save_16bit=None, kill_rank_in_save=None,
             timeout=300, progress=False):
    job = {"config": config, "model": model.as_dict(), "steps": steps, "device": "cpu", "save_dir": str(save_dir),
           "save_tag": tag, "save_16bit": save_16bit, "kill_rank_in_save": kill_rank_in_save}
    return _launch(job, ranks, timeout, progress)


def resume_run(config, load_dir, ranks=3, steps=1, model=SMALL, tag=None, save_dir=None, timeout=300,
               progress=False):
    job = {"config": config, "model": model.as_dict(), "steps": steps, "device": "cpu", "load_dir": str(load_dir),
           "load_tag": tag, "save_dir": str(save_dir) if save_dir else None}
    return _launch(job, ranks, timeout, progress)


def _launch(job, ranks, timeout, progress):
    from zerolab.run.launch import launch

    return launch(job, ranks, timeout=timeout, progress=progress, worker="zerolab.ckpt.worker")
