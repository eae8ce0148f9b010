"""`engine.backward(loss)` and plain `loss.backward()` side by side on real ranks (lesson 10).

``compare(stage)`` starts the ranks (zerolab.run.launch, so an identical job comes from $ZEROLAB_RUN_CACHE when it is
set); each rank (``python -m zerolab.run.backward JOB.json``) trains the tiny GPT from the same seed once per way of
calling backward, with gradient accumulation, and reports the gradient norm DeepSpeed computed at each optimizer step
and how far its parameters end from the ``engine.backward`` run's:

- "engine": ``engine.backward(loss)``, DeepSpeed's own call;
- "plain": ``loss.backward()`` on the loss of ``engine(tokens)``, which DeepSpeed 0.19.8 accepts at ZeRO stages 1-3;
- "plain, loss / gas": ``(loss / gradient_accumulation_steps).backward()``, the habit plain PyTorch teaches.

The optimizer is torch's SGD with clipping off: Adam's update hardly moves when every gradient is scaled by the same
factor, and DeepSpeed's default clipping (1.0) would rescale large gradients anyway, hiding the difference.
"""
from zerolab.run.worker import emit, serve, start_cpu_rank

MODES = ("engine", "plain", "plain, loss / gas")
ACCUMULATION = 2


def job(stage, steps=2, model=None, return_params=False):
    """The rank job: ZeRO ``stage``, ``steps`` optimizer steps of ACCUMULATION micro-steps each, fp32; with
    ``return_params`` each mode's final parameters come back too (a test compares them with plain torch)."""
    from zerolab.run.model import ModelSpec

    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": ACCUMULATION,
              "gradient_clipping": 0.0, "zero_allow_untested_optimizer": True, "zero_optimization": {"stage": stage}}
    return {"config": config, "model": (model or ModelSpec()).as_dict(), "steps": steps, "lr": 0.05,
            "modes": list(MODES), "device": "cpu", "return_params": return_params}


def compare(stage, ranks=2, steps=2, progress=True):
    """[per rank] {mode: {"grad_norms": [...], "max_param_difference": float}} of a real run on CPU ranks."""
    from zerolab.run.launch import launch

    return launch(job(stage, steps), ranks, timeout=300, progress=progress, worker="zerolab.run.backward")


def table(results, rank=0):
    """The side-by-side as text: one row per way of calling backward."""
    from zerolab.base.i18n import tr

    rows = [[tr("backward called as"), tr("gradient norm at each step"), tr("largest parameter difference from engine")]]
    for mode, found in results[rank].items():
        if "error" in found:
            rows.append([mode, found["error"].split(". ")[0], "-"])
            continue
        rows.append([mode, ", ".join("-" if norm is None else f"{norm:.4f}" for norm in found["grad_norms"]),
                     f"{found['max_param_difference']:.2e}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def main(job_path):
    serve(job_path, run_job)


def run_job(job, rank):
    import torch

    from zerolab.run.model import ModelSpec, TinyGPT, synthetic_batch

    deepspeed = start_cpu_rank()
    spec = ModelSpec(**job["model"])
    found, reference = {}, None
    for mode in job["modes"]:
        emit(event="phase", rank=rank, phase=mode)
        torch.manual_seed(0)
        model = TinyGPT(spec)
        optimizer = torch.optim.SGD(model.parameters(), lr=job["lr"])
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=job["config"])
        try:
            norms = _train(engine, spec, job["steps"], mode, rank, synthetic_batch)
        except RuntimeError as error:  # stage 0 refuses loss.backward(), and says what to call instead
            found[mode] = {"error": str(error)}
            continue
        params = torch.cat([_full(engine, p).reshape(-1) for p in engine.module.parameters()])
        reference = params if reference is None else reference
        found[mode] = {"grad_norms": norms, "max_param_difference": float((params - reference).abs().max())}
        if job.get("return_params"):
            found[mode]["params"] = params.tolist()
    return found


def _train(engine, spec, steps, mode, rank, synthetic_batch):
    gas, norms = engine.gradient_accumulation_steps(), []
    for step in range(steps):
        for micro in range(gas):
            tokens, targets = synthetic_batch(spec, engine.train_micro_batch_size_per_gpu(), step * gas + micro, rank)
            loss = engine(tokens, targets)
            if mode == "engine":
                engine.backward(loss)
            elif mode == "plain":
                loss.backward()
            else:
                (loss / gas).backward()
            engine.step()
        norm = engine.get_global_grad_norm()  # None at stage 0 without clipping: nothing computed it
        norms.append(None if norm is None else float(norm))
    return norms


def _full(engine, param):
    """The whole parameter in fp32, also where ZeRO-3 keeps only a shard of it."""
    from deepspeed.utils import safe_get_full_fp32_param

    return (safe_get_full_fp32_param(param) if engine.zero_optimization_stage() else param).detach().float()


if __name__ == "__main__":
    import sys

    main(sys.argv[1])
