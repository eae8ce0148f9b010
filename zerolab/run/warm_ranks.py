"""The warm server of CPU runs (zerolab.run.warm): ``python -m zerolab.run.warm_ranks``.

It imports once what every rank of a CPU run imports: torch, torch._dynamo (torch.optim's constructors import it),
DeepSpeed, and the Muon optimizer that deepspeed.initialize imports to check the optimizer. Each child it forks is
one rank, running ``main(job_path)`` of the rank's worker module (zerolab.run.worker, zerolab.ckpt.worker) with the
environment zerolab.run.launch gave it. A rank started as ``python -m WORKER`` spent about 5 s of CPU on these
imports and well under a second training the tiny GPT (profiled on 2 cores); a forked one starts at once.

GPU runs start fresh processes: CUDA must not be set up in a parent that forks.
"""
import os

from zerolab.run import warm

SERVER = "zerolab.run.warm_ranks"


def start_rank(worker, job_path, env, log_path):
    """Fork a rank running ``worker.main(job_path)``; a Popen-like handle, or None (then start a fresh process)."""
    return warm.start(SERVER, {"worker": worker, "job": job_path, "env": env, "cwd": os.getcwd(), "log": log_path})


def _warm_up():
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch.distributed  # noqa: F401

    import deepspeed  # noqa: F401

    try:  # deepspeed.initialize imports it to check the optimizer type (it compiles kernels: a second of CPU)
        from deepspeed.runtime.zero.muon.muon_optimizer import MuonWithAuxAdam  # noqa: F401
    except ImportError:
        pass
    from zerolab.run import measure, meter, model, worker  # noqa: F401
    from zerolab.run.op_cache import probe_compatible_ops

    probe_compatible_ops()


def _run_rank(request):
    import importlib

    return importlib.import_module(request["worker"]).main(request["job"])


if __name__ == "__main__":
    warm.serve(_warm_up, _run_rank)
