"""A ZeRO-3 hang on real ranks (lesson 10): one rank skips a layer's forward, and the ranks' collectives part ways.

``reproduce(fix)`` starts 2 CPU ranks (zerolab.run.launch, so an identical job comes from $ZEROLAB_RUN_CACHE when it
is set). Each rank (``python -m zerolab.run.hang JOB.json``) trains a three-layer network under ZeRO-3 with every
parameter partitioned (``stage3_param_persistence_threshold`` 0: the default would keep layers this small whole, and
nothing would be gathered), and rank 1 skips the middle layer ``l1`` in step 1, after step 0 has recorded the order
of the modules. torch.distributed starts with a timeout of ``timeout_s`` seconds, so a rank stuck in a collective
raises instead of waiting for ever (gloo then closes its connections, so the other rank's wait ends too, with
"Connection closed by peer" if its own timeout has not come yet); each rank reports where it was: the collective
(the torch.distributed function) and the line of the model's own code in the traceback.

``fix`` is a way a user might try to make the skip safe: "none", "mask" (every rank runs ``l1`` and the skipping
rank multiplies its output by 0), "persist" (``stage3_param_persistence_threshold`` large enough to keep every
parameter whole), "external" (``deepspeed.zero.register_external_parameter`` of ``l1``'s parameters on the
network) or "prefetch0" (``stage3_prefetch_bucket_size`` 0: nothing fetched ahead; the ranks' all-gathers then pair
up in order, and gloo aborts the rank that receives the wrong size, so the run fails rather than returns).
"""
import traceback

from zerolab.run.worker import emit, serve, start_cpu_rank

FIXES = ("none", "mask", "persist", "external", "prefetch0")
STEPS = 3
SKIP_STEP = 1  # after step 0, in which DeepSpeed records the order of the modules it will prefetch along
SKIPPING_RANK = 1
COLLECTIVES = ("all_gather_into_tensor", "reduce_scatter_tensor", "all_reduce", "broadcast", "all_gather",
               "reduce_scatter", "_all_gather_base", "_reduce_scatter_base")


def job(fix="none", timeout_s=10):
    return {"fix": fix, "timeout_s": timeout_s, "device": "cpu"}


def reproduce(fix="none", timeout_s=10, progress=True):
    """[per rank] {"finished": bool, "param_sum": float or None, "error": str, "collective": str, "model_line": str,
    "phase": "forward" or "backward"} of a real run on 2 CPU ranks."""
    from zerolab.run.launch import launch

    return launch(job(fix, timeout_s), 2, timeout=120 + 3 * timeout_s, progress=progress, worker="zerolab.run.hang")


def describe(results):
    """One line per rank, in the learner's language."""
    import re

    from zerolab.base.i18n import tr

    lines = []
    for rank, found in enumerate(results):
        if found["finished"]:
            lines.append(tr(f"rank {rank}: finished {STEPS} steps; sum of its parameters {found['param_sum']:.6f}"))
            continue
        error = re.sub(r"^\[[^\]]*\]\s*", "", found["error"]).split(". ")[0]  # gloo's source path: noise
        how = tr("stopped by its timeout") if "Timed out" in error else \
            tr("stopped when the other rank's timeout closed the connection")
        if found["phase"] == "forward":
            lines.append(tr(f"rank {rank}: {how} in step {found['step']}'s forward, at `{found['model_line']}`, "
                            f"waiting in {found['collective']} ({error})"))
        else:
            lines.append(tr(f"rank {rank}: {how} in step {found['step']}'s backward, waiting in "
                            f"{found['collective']} ({error})"))
    return "\n".join(lines)


def main(job_path):
    serve(job_path, run_job)


def build(fix, rank, state):
    import deepspeed
    import torch
    from torch import nn

    class Body(nn.Module):
        def __init__(self):
            super().__init__()
            self.l0, self.l1, self.l2 = nn.Linear(32, 64), nn.Linear(64, 64), nn.Linear(64, 8)
            if fix == "external":
                for param in self.l1.parameters():
                    deepspeed.zero.register_external_parameter(self, param)

        def forward(self, x):
            h = torch.relu(self.l0(x))
            skip = rank == SKIPPING_RANK and state["step"] == SKIP_STEP
            if fix == "mask":
                y = self.l1(h)  # every rank runs l1, so every rank makes the same collectives
                h = h + 0.0 * y.sum() if skip else torch.relu(y)
            elif not skip:
                h = torch.relu(self.l1(h))
            return self.l2(h)

    torch.manual_seed(0)
    return Body()


def run_job(job, rank):
    import torch

    deepspeed = start_cpu_rank(timeout_s=job["timeout_s"])
    zero = {"stage": 3, "stage3_param_persistence_threshold": 10**9 if job["fix"] == "persist" else 0}
    if job["fix"] == "prefetch0":
        zero["stage3_prefetch_bucket_size"] = 0
    config = {"train_micro_batch_size_per_gpu": 8, "zero_optimization": zero,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}}
    state = {"step": 0, "phase": "forward"}
    net = build(job["fix"], rank, state)
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    generator = torch.Generator().manual_seed(rank)
    try:
        for step in range(STEPS):
            state.update(step=step, phase="forward")
            emit(event="phase", rank=rank, phase=f"step {step}")
            x, y = torch.randn(8, 32, generator=generator), torch.randn(8, 8, generator=generator)
            loss = torch.nn.functional.mse_loss(engine(x), y)
            state["phase"] = "backward"
            engine.backward(loss)
            engine.step()
    except RuntimeError as error:
        return {"finished": False, "param_sum": None, "phase": state["phase"], "step": state["step"],
                "error": str(error).strip().splitlines()[0], **_where(error)}
    from deepspeed.utils import safe_get_full_fp32_param

    total = sum(float(safe_get_full_fp32_param(p).sum()) for p in engine.module.parameters())
    return {"finished": True, "param_sum": total, "phase": None, "step": STEPS, "error": "", "collective": "",
            "model_line": ""}


def _where(error):
    """The innermost torch.distributed collective in the error's traceback, and the last line of this module's
    model code that led to it."""
    frames = traceback.extract_tb(error.__traceback__)
    collective = next((f.name for f in reversed(frames) if f.name in COLLECTIVES), None)
    if collective is None and any(f.name == "fetch_sub_module" for f in frames):
        collective = "an all-gather of parameters (DeepSpeed's fetch_sub_module waits for it)"
    model = [f for f in frames if f.filename == __file__ and f.name == "forward"]
    return {"collective": collective, "model_line": model[-1].line if model else "(backward)",
            "frames": [f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} {f.name}" for f in frames[-8:]]}


if __name__ == "__main__":
    import sys

    main(sys.argv[1])
