"""Rank function for tests/test_claims_09.py (lesson 09's claims about DeepSpeed checkpoints), run by
zerolab.handmade.core.harness as kind "claim_runs_09:saves" on 2 gloo CPU ranks.

It trains the tiny GPT two steps under each config of RUNS and saves each into a folder of its own under
job["root"], as a training script does: save_checkpoint with no tag, then save_16bit_model with its default file
name. The test reads the files; the ranks report what only they see: what the module held after training (numel
per parameter), save_16bit_model's answer, the order of rank 0's writes in the stage-2 save, and a load of the
stage-2 save converted to a universal checkpoint by rank 0 (ds_to_universal with one worker each, no process pool
allowed) into a folder where a decoy `latest` names a tag that does not exist.
"""
import os

# name: (ZeRO stage, precision, model)
RUNS = {"stage0": (0, "bf16", "small"),
        "stage1_fp32": (1, "fp32", "small"),
        "stage2": (2, "bf16", "small"),
        "stage3": (3, "bf16", "small"),
        "stage3_default_gathered": (3, "bf16", "wide")}
STEPS = 2
DECOY = "no_such_tag"


def spec(model):
    """"small" is the tiny GPT of lesson 09's test cells (every parameter under 5,000 elements); "wide" has token
    embeddings and an output head of 4096 x 32 = 131,072 elements each, above DeepSpeed's default stage-3
    persistence threshold (100,000), and every other parameter far below it."""
    from zerolab.ckpt.runs import SMALL
    from zerolab.run.model import ModelSpec

    return SMALL if model == "small" else ModelSpec(layers=1, width=32, heads=2, vocab=4096, seq_len=16)


def config(name, load_universal=False):
    """The lesson's checkpoint_config (stage 3: persistence threshold 0); "stage3_default_gathered" leaves the
    threshold at DeepSpeed's default and sets stage3_gather_16bit_weights_on_model_save."""
    from zerolab.ckpt.runs import checkpoint_config

    stage, precision, _ = RUNS[name]
    ds_config = checkpoint_config(stage=stage, precision=precision, load_universal=load_universal)
    if name == "stage3_default_gathered":
        ds_config["zero_optimization"].pop("stage3_param_persistence_threshold")
        ds_config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] = True
    return ds_config


def saves(job, namespace):
    import deepspeed
    import torch
    import torch.distributed as dist

    from zerolab.ckpt.worker import universal_info
    from zerolab.run.model import TinyGPT, synthetic_batch
    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()
    rank = dist.get_rank()
    found = {}
    for name, (stage, _, model) in RUNS.items():
        engine = _trained(deepspeed, torch, TinyGPT, synthetic_batch, spec(model), config(name), rank)
        held = {n: p.numel() for n, p in engine.module.named_parameters()}
        folder = os.path.join(job["root"], name)
        with _writes_watched(engine, watch=name == "stage2" and rank == 0) as writes:
            engine.save_checkpoint(folder, client_state=universal_info() if stage in (1, 2) else {})
        found[name] = {"global_steps": engine.global_steps, "held": held, "writes": writes,
                       "held_after_save": {n: p.numel() for n, p in engine.module.named_parameters()},
                       "save_16bit_model": engine.save_16bit_model(folder)}
        dist.barrier()
        engine.destroy()
    found["universal"] = _load_universal(job["root"], deepspeed, torch, dist, TinyGPT, synthetic_batch, rank)
    return found


def _trained(deepspeed, torch, TinyGPT, synthetic_batch, model_spec, ds_config, rank):
    torch.manual_seed(0)
    model = TinyGPT(model_spec)
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=ds_config)
    for step in range(engine.global_steps, STEPS):
        tokens, targets = synthetic_batch(model_spec, engine.train_micro_batch_size_per_gpu(), step, rank)
        engine.backward(engine(tokens, targets))
        engine.step()
    return engine


class _writes_watched:
    """The names of the files rank 0 writes during save_checkpoint, in order: the checkpoint engine's saves, the
    files DeepSpeed's engine opens (`latest`) and the scripts it copies."""

    def __init__(self, engine, watch):
        self.engine, self.watch, self.writes = engine, watch, []

    def __enter__(self):
        if self.watch:
            import deepspeed.runtime.engine as module

            writes, save, copy = self.writes, self.engine.checkpoint_engine.save, module.copyfile

            def saving(state_dict, path, *args, **kwargs):
                writes.append(os.path.basename(path))
                return save(state_dict, path, *args, **kwargs)

            def opening(path, *args, **kwargs):
                writes.append(os.path.basename(path))
                return open(path, *args, **kwargs)

            def copying(source, destination):
                writes.append(os.path.basename(destination))
                return copy(source, destination)

            self.restore = lambda: (setattr(self.engine.checkpoint_engine, "save", save),
                                    setattr(module, "copyfile", copy), delattr(module, "open"))
            self.engine.checkpoint_engine.save, module.open, module.copyfile = saving, opening, copying
        return self.writes

    def __exit__(self, *exc):
        if self.watch:
            self.restore()


def _load_universal(root, deepspeed, torch, dist, TinyGPT, synthetic_batch, rank):
    """Rank 0 converts the stage-2 save with ds_to_universal.main (an argparse.Namespace, one worker each, a process
    pool refused) and leaves a decoy `latest`; then both ranks load it with checkpoint.load_universal and no tag."""
    import argparse

    universal = os.path.join(root, "universal")
    converted = None
    if rank == 0:
        from deepspeed.checkpoint import ds_to_universal

        def no_pool(*args, **kwargs):
            raise AssertionError("ds_to_universal started a process pool")

        tag = open(os.path.join(root, "stage2", "latest")).read().strip()
        real_pool, ds_to_universal.ProcessPoolExecutor = ds_to_universal.ProcessPoolExecutor, no_pool
        try:
            ds_to_universal.main(argparse.Namespace(
                input_folder=os.path.join(root, "stage2", tag), output_folder=os.path.join(universal, tag),
                num_extract_workers=1, num_merge_workers=1, keep_temp_folder=False, strict=True,
                inject_missing_state=False))
        finally:
            ds_to_universal.ProcessPoolExecutor = real_pool
        converted = sorted(os.listdir(universal))
        with open(os.path.join(universal, "latest"), "w") as handle:
            handle.write(DECOY)
    dist.barrier()
    torch.manual_seed(1)  # other initial weights than the saved run's
    model = TinyGPT(spec("small"))
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(),
                                           config=config("stage2", load_universal=True))
    path, _ = engine.load_checkpoint(universal)
    optimizer = engine.optimizer.optimizer
    steps = {int(state["step"]) for state in optimizer.state.values() if "step" in state}
    loaded = {"path": path, "global_steps": engine.global_steps, "adam_steps": sorted(steps),
              "params": {n: p.detach().float().flatten().tolist() for n, p in engine.module.named_parameters()},
              "converted": converted}
    engine.destroy()
    return loaded
