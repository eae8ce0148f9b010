"""Real DeepSpeed ZeRO runs of a tiny GPT on N ranks, measured next to zerolab.engine.memory's prediction.

    from zerolab.run import run, make_config
    result = run(make_config(stage=2, offload_optimizer="cpu"), ranks=2, steps=3)
    print(result.table()); result.plot()

CPU ranks (gloo, DS_ACCELERATOR=cpu) work everywhere; ``device="cuda"`` uses NCCL, one GPU per rank.
Importing this package loads neither torch nor DeepSpeed: the ranks are separate processes.

May import: zerolab.engine, zerolab.base and zerolab.errors.
"""
from zerolab.errors import UserError
from zerolab.engine.config_precision import master_and_moments
from zerolab.run.configs import default_precision, describe, make_config, update_rule
from zerolab.run.diagnose import RunFailed, RunTimeout
from zerolab.run.model import ModelSpec

__all__ = ["run", "run_in_notebook", "make_config", "default_precision", "ModelSpec", "RunFailed", "RunTimeout"]


def run(config=None, ranks=2, device="cpu", steps=5, model=ModelSpec(), timeout=600, progress=True,
        fail_rank=None, **knobs):
    """Train the tiny GPT with ``deepspeed.initialize(config=config)`` on ``ranks`` processes; return a RunResult.

    ``config`` is a ds_config dict; without one, ``make_config(**knobs)`` builds it (stage, offload_optimizer,
    offload_param, precision, micro_batch, ...). ``fail_rank`` makes that rank raise right after distributed
    starts (to see, and test, how a failing rank stops the run). Raises RunFailed with one clear message when
    a rank fails, RunTimeout past ``timeout`` seconds; every rank is stopped in all cases.
    """
    from zerolab.run.launch import launch
    from zerolab.run.model import TinyGPT, count_params, largest_layer_params, muon_layout
    from zerolab.engine.deepspeed_traffic import step_traffic
    from zerolab.run.report import RunResult, predict, predict_muon

    if device not in ("cpu", "cuda"):
        raise UserError(f"device must be cpu or cuda, got {device!r}")
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise UserError(f"ranks must be a whole number >= 1, got {ranks!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise UserError(f"steps must be a whole number >= 1, got {steps!r}")
    if config is None:
        knobs.setdefault("precision", default_precision(device))
        config = make_config(**knobs)
    elif knobs:
        raise UserError(f"give either a config or knobs ({', '.join(knobs)}), not both")
    if device == "cuda":
        _check_gpus(ranks)
    stage, offload_optimizer, offload_param, precision = describe(config)
    master, moments = master_and_moments(config, stage, precision)
    rule = update_rule(config)
    if rule == "muon" and (stage == 0 or "cpu" in (offload_optimizer, offload_param) or master != "fp32"):
        raise UserError("a Muon run is measured next to a prediction at stages 1-3, without offload and with fp32 "
                        "master weights: the setups zerolab.engine.muon models")

    import torch  # the parent only counts parameters; training happens in the rank processes

    with torch.device("meta"):
        shape = TinyGPT(model)
    params, largest = count_params(shape), largest_layer_params(shape)
    sizes = [p.numel() for p in shape.parameters()]
    layout = muon_layout(shape) if rule == "muon" else None
    job = {"config": config, "model": model.as_dict(), "steps": steps, "device": device, "fail_rank": fail_rank}
    ranks_measured = launch(job, ranks, timeout=timeout, progress=progress)
    losses = [rank["loss"] for rank in ranks_measured]
    setup = {"stage": stage, "offload_optimizer": offload_optimizer, "offload_param": offload_param,
             "precision": precision, "master": master, "moments": moments, "update_rule": rule, "ranks": ranks,
             "device": device,
             "params": params, "largest_layer_params": largest, "steps": steps, "model": model.as_dict(),
             "micro_batch": ranks_measured[0]["micro_batch"],
             "accumulation": ranks_measured[0]["gradient_accumulation_steps"],
             "wrapper": ranks_measured[0]["wrapper"], "optimizer": ranks_measured[0]["optimizer"]}
    predicted = predict(params, stage, ranks, offload_optimizer, offload_param, precision, largest, master, moments)
    return RunResult(config=config, setup=setup, ranks=ranks_measured, predicted=predicted,
                     loss=[sum(step) / len(step) for step in zip(*losses)],
                     predicted_ranks=layout and predict_muon(predicted, layout, stage, ranks, precision),
                     # Muon's traffic (all-reduces of the matrices that straddle partitions) is not modelled yet
                     predicted_traffic=None if layout else [
                         step_traffic(sizes, stage, ranks, rank, setup["accumulation"], precision, offload_optimizer,
                                      offload_param, device, master) for rank in range(ranks)])


def run_in_notebook(config=None, ranks=2, steps=3, **options):
    """:func:`run` for a notebook cell: progress updates in place, and the RunResult prints as its table."""
    return run(config, ranks=ranks, steps=steps, **options)


def _check_gpus(ranks):
    import torch

    if not torch.cuda.is_available():
        raise UserError("device cuda needs a CUDA GPU and a CUDA build of torch; use --device cpu here")
    if torch.cuda.device_count() < ranks:
        raise UserError(f"{ranks} GPU ranks need {ranks} GPUs, this machine has {torch.cuda.device_count()}")
