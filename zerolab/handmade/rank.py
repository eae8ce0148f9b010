"""The ranks: ``python -m zerolab.handmade.rank JOB.json N``, started by zerolab.handmade.harness.

The process imports torch once, then forks the N ranks (torch's import is most of a rank's start-up: N imports
on 2 cores took seconds). Each rank joins the gloo group, runs the learner's cell (job["source"]) after a
preamble, exercises what the cell defines on the fixed model (zerolab.handmade.model) and writes what it measured
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
    kind = job["kind"]
    if kind == "deepspeed":
        result = deepspeed_run(job, rank)
    elif ":" in kind:  # "package.module:function", called as function(job, namespace or None)
        result = _runner(kind)(job, learner_namespace(job["source"]) if "source" in job else None)
    else:
        namespace = learner_namespace(job["source"])
        result = {"zero1": zero1_run, "zero1_bytes": zero1_bytes_run}[kind](job, namespace)
    dist.barrier()
    dist.destroy_process_group()
    return result


def _runner(kind):
    import importlib

    module, _, function = kind.partition(":")
    return getattr(importlib.import_module(module), function)


CONTEXT = None  # {"before", "after"}: words the failure message puts around an error raised in the current run
GRAD_SHARD_CONTEXT = {
    "before": "with each .grad None and the averaged gradient of the rank's own elements in .grad_shard (how "
              "exercise 3 hands gradients over)",
    "after": "when a parameter has no .grad, use its .grad_shard as it is (it holds only this rank's elements), "
             "and skip the parameters with neither"}
BASELINE = None  # zerolab.handmade.live.Baseline: the tensors alive before the learner's cell ran (the grader's)


def learner_namespace(source):
    global BASELINE
    from zerolab.handmade import live
    from zerolab.handmade.partition import flat_partition
    from zerolab.handmade.source import FORBIDDEN  # noqa: F401 (imported before the blocker needs it)

    _block_libraries()
    live.watch_collectives()  # before the cell runs, so that `from torch.distributed import ...` is watched too
    BASELINE = live.Baseline()
    namespace = {"__name__": "__learner__", "partition": flat_partition}
    exec(compile(PREAMBLE, "<preamble>", "exec"), namespace)
    exec(compile(source, CELL, "exec"), namespace)
    namespace["partition"] = flat_partition  # the cell may define its own; the ranks use a correct one
    return namespace


def zero1_run(job, namespace):
    from zerolab.handmade import live
    from zerolab.handmade import model as fixed
    from zerolab.handmade import verdict

    hyper, steps, groups = job["hyper"], job["steps"], job.get("groups")
    net = fixed.build()
    numels = fixed.group_numels(net, groups)
    optimizer = namespace["ShardedAdamW"](fixed.param_groups(net, groups), **_hyper(hyper))
    owned = _everyones_owned(optimizer)
    if None not in owned and verdict.ownership_problem(owned, numels, groups):
        return {"owned": _mine(owned)}  # training would wait in collectives of different sizes until the timeout
    # measured: the second step, where the moments exist and buffers have been reused
    memory, all_gathered, measured = None, None, min(1, steps - 1)
    for step in range(steps):
        optimizer.zero_grad()
        _local_loss(net, step).backward()
        if step == measured:
            live.forget_collectives()
        optimizer.step()
        if step == measured:
            memory, all_gathered = rank_memory(net), live.all_gathered_elements()
    owned = _everyones_owned(optimizer)  # `owned` may be filled in by step()
    as_asked = None not in owned and not (verdict.ownership_problem(owned, numels, groups)
                                          or verdict.group_partition_problem(owned, groups))

    decay = dict(lr=0.1, betas=hyper["betas"], eps=hyper["eps"], weight_decay=0.5)
    frozen = fixed.build()
    optimizer = namespace["ShardedAdamW"](frozen.parameters(), **_hyper(decay))
    before = fixed.flat(frozen)
    optimizer.zero_grad()
    (frozen(fixed.batch(0)[0]).sum() * 0).backward()  # zero gradients: only weight decay moves a parameter
    optimizer.step()
    return {"params": fixed.flat(net), "memory": memory, "all_gathered": all_gathered, "owned": _mine(owned),
            "decay": {"hyper": decay, "before": before, "after": fixed.flat(frozen)},
            # exercise 3's hand-over assumes partition's shares: a run with others would fail for that reason alone
            "grad_shard": _grad_shard_run(namespace, hyper, groups) if as_asked else None}


def _everyones_owned(optimizer):
    """Every rank's `owned` list (None where a rank has none), the same on all ranks."""
    import torch.distributed as dist

    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, _plain_ranges(getattr(optimizer, "owned", None)))
    return everyone


def _mine(everyone):
    import torch.distributed as dist

    return everyone[dist.get_rank()]


def _grad_shard_run(namespace, hyper, groups):
    """Train as exercise 3 hands the gradients over: each .grad None, the averaged gradient of the elements this
    rank owns in .grad_shard. {"params": after model.GRAD_SHARD_STEPS steps}; the learner's error propagates (so
    the launcher stops the other ranks, which may be waiting in a collective) with CONTEXT saying where."""
    global CONTEXT
    import torch.distributed as dist

    from zerolab.handmade import model as fixed
    from zerolab.handmade.partition import group_partition

    world_size, rank = dist.get_world_size(), dist.get_rank()
    net = fixed.build()
    params = fixed.params_in_group_order(net, groups)
    mine = {index: (start, end) for index, start, end in
            group_partition(fixed.numels_per_group(net, groups), world_size)[rank]}
    CONTEXT = GRAD_SHARD_CONTEXT
    optimizer = namespace["ShardedAdamW"](fixed.param_groups(net, groups), **_hyper(hyper))
    for step in range(fixed.GRAD_SHARD_STEPS):
        optimizer.zero_grad()
        _local_loss(net, step).backward()
        for index, p in enumerate(params):
            grad, p.grad = p.grad, None
            dist.all_reduce(grad)
            start, end = mine.get(index, (0, 0))  # (0, 0): a parameter this rank owns nothing of
            p.grad_shard = (grad / world_size).view(-1)[start:end].clone() if end else None
        optimizer.step()
    CONTEXT = None
    return {"params": fixed.flat(net)}


def zero1_bytes_run(job, namespace):
    """The learner's ZeRO-1 and DeepSpeed stage 1 side by side in the same ranks: parameters and bytes."""
    from zerolab.handmade import live
    from zerolab.handmade import model as fixed

    net = fixed.build()
    optimizer = namespace["ShardedAdamW"](net.parameters(), **_hyper(job["hyper"]))
    for step in range(job["steps"]):
        optimizer.zero_grad()
        _local_loss(net, step).backward()
        grad_bytes = held_bytes([p.grad for p in net.parameters()])
        live.forget_collectives()
        optimizer.step()
    memory = rank_memory(net)
    mine = {"params": fixed.flat(net), "param_bytes": memory["parameters"], "grad_bytes": grad_bytes,
            "optimizer_state_bytes": memory[live.OTHER], "communication_bytes": memory[live.COMMUNICATION]}
    del optimizer, net, memory
    return {"handmade": mine, "deepspeed": deepspeed_run(job, int(os.environ["RANK"]))}


def deepspeed_run(job, rank):
    import deepspeed

    from zerolab.handmade import model as fixed
    from zerolab.run import measure
    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()  # no compile, and no compiler in the grading sandbox
    net = fixed.build()
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=job["config"])
    grad_bytes = {}
    # The micro-batch and accumulation DeepSpeed resolved from the config (it may derive either one).
    micro, accumulation = engine.train_micro_batch_size_per_gpu(), engine.gradient_accumulation_steps()
    for step in range(job["steps"]):
        inputs, targets = fixed.batch(step)
        part = fixed.rows(rank, int(os.environ["WORLD_SIZE"]))
        inputs, targets = inputs[part], targets[part]
        for micro_step in range(accumulation):
            rows = slice(micro_step * micro, (micro_step + 1) * micro)
            engine.backward(fixed.loss(engine, inputs[rows], targets[rows]) * job.get("loss_scale", 1))
            grad_bytes = measure.gradient_bytes(engine)
            engine.step()
    return {"params": fixed.flat(engine.module), **measure.model_state_bytes(engine, grad_bytes),
            "micro_batch": micro, "accumulation": accumulation,
            "wrapper": type(engine.optimizer).__name__, "optimizer": type(measure.inner_optimizer(engine)).__name__}


def rank_memory(net):
    """Bytes of every tensor alive in this rank (zerolab.handmade.live) apart from what existed before the learner's
    cell ran: {"parameters", "gradients", "buffers", "communication buffers" (storages that went through a
    collective in this step and are still alive), "other"}. "other" is what the learner's optimizer keeps: its
    state, wherever it is stored."""
    from zerolab.handmade import live

    lines = dict(live.model_lines(net), **{live.COMMUNICATION: live.communication_storages()})
    return live.breakdown(lines, exclude=[BASELINE])


def held_bytes(tensors, exclude=()):
    """Bytes of the storages behind `tensors`, each once, leaving out storages of `exclude` and their .grad.

    Whole storages, not views: a "shard" that is a slice of a full-size buffer keeps the full buffer alive.
    """
    import torch

    skip = set()
    for t in exclude:
        for tensor in (t, getattr(t, "grad", None)):
            if torch.is_tensor(tensor):
                skip.add(tensor.untyped_storage().data_ptr())
    seen, total = set(), 0
    for t in tensors:
        if not torch.is_tensor(t):
            continue
        storage = t.untyped_storage()
        if storage.data_ptr() in skip or storage.data_ptr() in seen or storage.nbytes() == 0:
            continue
        seen.add(storage.data_ptr())
        total += storage.nbytes()
    return total


def _local_batch(step):
    import torch.distributed as dist

    from zerolab.handmade import model as fixed

    inputs, targets = fixed.batch(step)
    part = fixed.rows(dist.get_rank(), dist.get_world_size())
    return inputs[part], targets[part]


def _local_loss(net, step):
    from zerolab.handmade import model as fixed

    return fixed.loss(net, *_local_batch(step))


def _hyper(hyper):
    return dict(lr=hyper["lr"], betas=tuple(hyper["betas"]), eps=hyper["eps"], weight_decay=hyper["weight_decay"])


def _plain_ranges(owned):
    try:
        return [[int(i), int(s), int(e)] for i, s, e in owned]
    except (TypeError, ValueError):
        return None


class _Blocked:
    """Refuses to import the libraries that already implement ZeRO, for the learner's code in this rank."""

    def find_spec(self, name, path=None, target=None):
        from zerolab.handmade.source import FORBIDDEN

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
    """What every rank imports before the learner's code runs (zerolab.handmade.rank_launcher does it once)."""
    import torch
    import torch._dynamo  # noqa: F401 (torch.optim.Optimizer's constructor imports it: a second of CPU per rank)
    import torch.distributed  # noqa: F401 (each rank imports it before the learner's code runs, as before)

    from zerolab.handmade import live, model, partition, source  # noqa: F401 (every rank needs them)

    torch.set_num_threads(1)


def fork_ranks_now(job_path, ranks):
    from zerolab.run.worker import stop_when_orphaned

    with open(job_path) as handle:
        job = json.load(handle)
    # Ranks that run no learner code may import DeepSpeed before forking: nothing the learner must not use is loaded.
    if job["kind"] == "deepspeed" or job.get("preimport_deepspeed"):
        import deepspeed  # noqa: F401
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
    sys.exit(fork_ranks(sys.argv[1], int(sys.argv[2])))
