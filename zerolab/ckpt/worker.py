"""One rank of a checkpoint job: ``python -m zerolab.ckpt.worker JOB.json``, started by zerolab.run.launch.

The job trains the tiny GPT for ``steps`` steps under ``config`` (after loading ``load_dir`` when given, the way a
resumed job does) and then saves to ``save_dir`` when given. Each rank writes what it saw to
``<result_dir>/rank<R>.json``: the global step, the optimizer's step count and the full fp32-rounded parameters
(gathered at ZeRO-3), so the launcher's caller can check a resume continues where the save stopped, and how many
elements the module's own ``state_dict()`` holds at the end.

``kill_rank_in_save`` makes that rank SIGKILL itself just before DeepSpeed writes its optimizer-state file: a
job killed in the middle of a save, for real.
"""
import os
import signal
import sys

from zerolab.run.worker import emit, serve, start_cpu_rank

# claim: universal-info-needed-at-stages-1-2
def universal_info():
    """What ds_to_universal needs at stages 1-2 and DeepSpeed writes only for AutoTP/AutoEP models: the universal
    checkpoint format's version, DeepSpeed's own constant (0.4 in 0.19.8)."""
    from deepspeed.checkpoint.constants import (UNIVERSAL_CHECKPOINT_INFO, UNIVERSAL_CHECKPOINT_VERSION_KEY,
                                                UNIVERSAL_CHECKPOINT_VERSION_VALUE)

    return {UNIVERSAL_CHECKPOINT_INFO: {UNIVERSAL_CHECKPOINT_VERSION_KEY: UNIVERSAL_CHECKPOINT_VERSION_VALUE}}


def main(job_path):
    serve(job_path, run_job)


def run_job(job, rank):
    import torch

    from zerolab.run.model import ModelSpec, TinyGPT, synthetic_batch

    deepspeed = start_cpu_rank()
    spec = ModelSpec(**job["model"])
    torch.manual_seed(0)
    model = TinyGPT(spec)
    emit(event="phase", rank=rank, phase="initialize")
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=job["config"])
    loaded = None
    if job.get("load_dir"):
        emit(event="phase", rank=rank, phase="load checkpoint")
        path, _ = engine.load_checkpoint(job["load_dir"], tag=job.get("load_tag"))
        if path is None:
            raise RuntimeError(f"DeepSpeed found no checkpoint to load in {job['load_dir']}")
        loaded = snapshot(engine)
    for step in range(job.get("steps", 0)):
        global_step = engine.global_steps
        tokens, targets = synthetic_batch(spec, engine.train_micro_batch_size_per_gpu(), global_step, rank)
        loss = engine(tokens, targets)
        engine.backward(loss)
        engine.step()
        emit(event="step", rank=rank, step=step + 1, steps=job["steps"], loss=loss.item(), seconds=0.0)
    if job.get("save_dir"):
        emit(event="phase", rank=rank, phase="save checkpoint")
        if job.get("kill_rank_in_save") == rank:
            _die_before_optimizer_file(engine)
        engine.save_checkpoint(job["save_dir"], tag=job.get("save_tag"), client_state=universal_info())
        if job.get("save_16bit"):
            engine.save_16bit_model(job["save_dir"], job["save_16bit"])
    # what `engine.module.state_dict()` holds after the job (ZeRO-3: placeholders above the persistence threshold, whatever the gather flag says)  # claim: zero3-state-dict-holds-placeholders
    state_dict_numel = sum(tensor.numel() for tensor in engine.module.state_dict().values())
    return {"rank": rank, "loaded": loaded, "final": snapshot(engine), "state_dict_numel": state_dict_numel}


def snapshot(engine):
    """Global step, the optimizer's step count and every parameter as a list (gathered at ZeRO-3)."""
    import deepspeed
    import torch

    params = dict(engine.module.named_parameters())
    with deepspeed.zero.GatheredParameters(list(params.values()), enabled=engine.zero_optimization_stage() == 3):
        values = {name: p.detach().float().flatten().tolist() for name, p in params.items()}
    return {"global_steps": engine.global_steps, "optimizer_step": optimizer_step(engine), "params": values}


# claim: torch-adam-step-in-each-parameter-state
def optimizer_step(engine):
    """The step count torch's Adam keeps in its state (the same on every parameter it has touched)."""
    optimizer = engine.optimizer
    inner = getattr(optimizer, "optimizer", optimizer)
    for state in inner.state.values():
        if "step" in state:
            step = state["step"]
            return int(step.item() if hasattr(step, "item") else step)
    return None


def _die_before_optimizer_file(engine):
    checkpoint_engine = engine.checkpoint_engine
    save = checkpoint_engine.save

    def save_or_die(state_dict, path, *args, **kwargs):
        if str(path).endswith("optim_states.pt"):
            os.kill(os.getpid(), signal.SIGKILL)
        return save(state_dict, path, *args, **kwargs)

    checkpoint_engine.save = save_or_die


if __name__ == "__main__":
    main(sys.argv[1])
