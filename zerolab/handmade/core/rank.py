"""The ranks: ``python -m zerolab.handmade.core.rank JOB.json N``, started by zerolab.handmade.core.harness.

The process imports torch once, then forks the N ranks (torch's import is most of a rank's start-up: N imports
on 2 cores took seconds). Each rank joins the gloo group, runs the learner's cell (job["source"]) after a
preamble, exercises what the cell defines on the fixed model (zerolab.handmade.core.model) and writes what it measured
to <dir>/rank<R>.json, or the learner's error to rank<R>.error.json; its output goes to <dir>/log<R>.txt.
"""
import json
import os
import signal
import sys
import time
import traceback

CELL = "<your cell>"
PREAMBLE = "import math\nimport torch\nimport torch.distributed as dist\n"


def main(job_path):
    from zerolab.run.worker import stop_when_orphaned

    stop_when_orphaned()
    with open(job_path) as handle:
        job = json.load(handle)
    rank = int(os.environ["RANK"])
    _write(job, f"rank{rank}.started", {})
    try:
        result = run(job, rank)
    except BaseException as error:
        _write(job, f"rank{rank}.error.json", _describe(error))
        return 1
    _write(job, f"rank{rank}.json", result)
    return 0


def run(job, rank):
    import datetime

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=job["collective_timeout"]))
    # job["kind"] is "package.module:function", called as function(job, the learner's namespace or None)
    result = _runner(job["kind"])(job, learner_namespace(job["source"]) if "source" in job else None)
    dist.barrier()
    dist.destroy_process_group()
    return result


def _runner(kind):
    import importlib

    module, _, function = kind.partition(":")
    return getattr(importlib.import_module(module), function)


CONTEXT = None  # {"before", "after"}: words the failure message puts around an error raised in the current run
BASELINE = None  # zerolab.handmade.core.live.Baseline: the tensors alive before the learner's cell ran (the grader's)


def learner_namespace(source):
    global BASELINE
    from zerolab.handmade.core import live
    from zerolab.handmade.core.partition import flat_partition
    from zerolab.lesson.source import FORBIDDEN  # noqa: F401 (imported before the blocker needs it)

    _block_libraries()
    live.watch_collectives()  # before the cell runs, so that `from torch.distributed import ...` is watched too
    BASELINE = live.Baseline()
    namespace = {"__name__": "__learner__", "partition": flat_partition}
    exec(compile(PREAMBLE, "<preamble>", "exec"), namespace)
    exec(compile(source, CELL, "exec"), namespace)
    namespace["partition"] = flat_partition  # the cell may define its own; the ranks use a correct one
    return namespace


def local_batch(step):
    import torch.distributed as dist

    from zerolab.handmade.core import model as fixed

    inputs, targets = fixed.batch(step)
    part = fixed.rows(dist.get_rank(), dist.get_world_size())
    return inputs[part], targets[part]


def local_loss(net, step):
    from zerolab.handmade.core import model as fixed

    return fixed.loss(net, *local_batch(step))


def adamw_kwargs(hyper):
    return dict(lr=hyper["lr"], betas=tuple(hyper["betas"]), eps=hyper["eps"], weight_decay=hyper["weight_decay"])


class _Blocked:
    """Refuses to import the libraries that already implement ZeRO, for the learner's code in this rank."""

    def find_spec(self, name, path=None, target=None):
        from zerolab.lesson.source import FORBIDDEN

        if not _called_from_learner():
            return None
        for prefix, what in FORBIDDEN.items():
            if name == prefix or name.startswith(prefix + "."):
                raise ImportError(f"FORBIDDEN: your code imports {name} ({what})")
        return None


def _called_from_learner():
    """Whether the import statement being run is the learner's own (torch imports its parts lazily too)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<frozen importlib") or name.endswith(os.path.join("importlib", "__init__.py"))
                or frame.f_code is _Blocked.find_spec.__code__ or frame.f_code is _called_from_learner.__code__):
            return name == CELL
        frame = frame.f_back
    return False


def _block_libraries():
    sys.meta_path.insert(0, _Blocked())


def _describe(error):
    frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == CELL]
    return {"type": type(error).__name__, "message": str(error)[:500],
            "line": frames[-1].lineno if frames else None, "in_learner_code": bool(frames),
            "traceback": traceback.format_exc()[-3000:], "context": CONTEXT}


def _write(job, name, payload):
    path = os.path.join(job["result_dir"], name)
    with open(path + ".tmp", "w") as handle:
        json.dump(payload, handle)
    os.replace(path + ".tmp", path)


def fork_ranks(job_path, ranks):
    """Fork the ranks from this process once torch is imported; 0 when all succeed. The first rank to fail stops
    the others half a second later (time for their own error files), like a launcher would."""
    import_what_ranks_need()
    return fork_ranks_now(job_path, ranks)


def import_what_ranks_need():
    """What every rank imports before the learner's code runs (zerolab.handmade.core.rank_launcher does it once)."""
    import torch
    import torch._dynamo  # noqa: F401 (torch.optim.Optimizer's constructor imports it: a second of CPU per rank)
    import torch.distributed  # noqa: F401 (each rank imports it before the learner's code runs, as before)

    from zerolab.handmade.core import live, model, partition
    from zerolab.lesson import source  # noqa: F401 (every rank needs them)

    torch.set_num_threads(1)


def fork_ranks_now(job_path, ranks):
    from zerolab.run.worker import stop_when_orphaned

    with open(job_path) as handle:
        job = json.load(handle)
    # Ranks that run no learner code may import DeepSpeed before forking: nothing the learner must not use is loaded.
    if job.get("preimport_deepspeed"):
        from zerolab.run.op_cache import probe_compatible_ops

        probe_compatible_ops()  # imports DeepSpeed
    children = set()
    for rank in range(ranks):
        pid = os.fork()
        if pid == 0:
            os._exit(_forked_rank(job_path, job, rank))
        children.add(pid)
    stop_when_orphaned()  # started after the forks: a thread does not survive fork
    failed = False
    while children:
        pid, status = os.wait()
        children.discard(pid)
        if os.waitstatus_to_exitcode(status) != 0 and not failed:
            failed = True
            time.sleep(0.5)
            for other in children:
                _kill(other)
    return 1 if failed else 0


def _forked_rank(job_path, job, rank):
    code = 1
    try:
        log = os.open(os.path.join(job["result_dir"], f"log{rank}.txt"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(rank)
        code = main(job_path)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return code


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


if __name__ == "__main__":
    # Through the imported module, not __main__: the exercises' rank sides read BASELINE and set CONTEXT there.
    from zerolab.handmade.core import rank as imported

    sys.exit(imported.fork_ranks(sys.argv[1], int(sys.argv[2])))
