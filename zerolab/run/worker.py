"""One rank of a run: ``python -m zerolab.run.worker JOB.json``, started by zerolab.run.launch.

The launcher sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT. This process trains the tiny GPT
with ``deepspeed.initialize`` under the job's ds_config, prints progress events on stdout as lines
``@@zerolab {json}``, and writes what it measured to ``<result_dir>/rank<R>.json`` (or, on failure, the error
to ``rank<R>.error.json``) for the launcher to collect.
"""
import json
import os
import statistics
import sys
import time
import traceback

EVENT_PREFIX = "@@zerolab "


def emit(**event):
    print(EVENT_PREFIX + json.dumps(event), flush=True)


def stop_when_orphaned(interval=1.0):
    """If the launcher dies without tearing down (kill -9), take this rank's whole process group with it."""
    import signal
    import threading

    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(interval)
        os.killpg(os.getpgid(0), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True).start()


def main(job_path):
    serve(job_path, train)


def serve(job_path, work):
    """One rank's life: read the job, run ``work(job, rank)``, and write its result, or its error, for the launcher."""
    stop_when_orphaned()
    with open(job_path) as handle:
        job = json.load(handle)
    rank = int(os.environ["RANK"])
    try:
        result = work(job, rank)
    except BaseException as error:  # reported to the launcher, which stops every rank
        _write(job, f"rank{rank}.error.json", {"rank": rank, "type": type(error).__name__, "message": str(error),
                                                 "traceback": traceback.format_exc()})
        emit(event="error", rank=rank, type=type(error).__name__, message=str(error))
        raise
    _write(job, f"rank{rank}.json", result)
    emit(event="done", rank=rank)


def start_cpu_rank(timeout_s=None):
    """The opening of a one-thread CPU rank (checkpoint jobs, lesson 10's runs): DeepSpeed's shm op skipped, gloo
    started, with a timeout of ``timeout_s`` seconds on every collective when given. Returns the deepspeed module."""
    import datetime

    import torch

    torch.set_num_threads(1)
    import deepspeed

    from zerolab.run.op_cache import skip_shm_comm_op

    skip_shm_comm_op()
    options = {} if timeout_s is None else {"timeout": datetime.timedelta(seconds=timeout_s)}
    deepspeed.init_distributed(dist_backend="gloo", **options)
    return deepspeed


def train(job, rank):
    import torch

    world_size = int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    import deepspeed

    from zerolab.run import measure, op_cache
    from zerolab.run.configs import update_rule
    from zerolab.run.meter import TrafficMeter
    from zerolab.run.model import ModelSpec, TinyGPT, synthetic_batch

    config, device = job["config"], job["device"]
    op_cache.skip_shm_comm_op()
    prepare_ops(config)
    if device == "cpu" and update_rule(config) == "muon":
        # DeepSpeed's Muon runs Newton-Schulz through torch.compile: on CPU ranks a fresh environment would spend a
        # minute compiling it, silently, for a model this small. Eager, it keeps the same state tensors.
        torch._dynamo.config.disable = True
    if device == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    deepspeed.init_distributed(dist_backend="nccl" if device == "cuda" else "gloo")
    if job.get("fail_rank") == rank:
        raise RuntimeError(f"injected failure on rank {rank} (fail_rank, used by the tests of teardown)")
    spec = ModelSpec(**job["model"])
    torch.manual_seed(0)
    model = TinyGPT(spec)
    emit(event="phase", rank=rank, phase="initialize")
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    memory_after_initialize = measure.current_memory_bytes(device)
    micro_batch = engine.train_micro_batch_size_per_gpu()
    accumulation = engine.gradient_accumulation_steps()

    meter = TrafficMeter(engine)
    losses, step_times, grad_bytes = [], [], {}
    for step in range(job["steps"]):
        started = time.perf_counter()
        step_loss = 0.0
        batches = [synthetic_batch(spec, micro_batch, step * accumulation + micro, rank)
                   for micro in range(accumulation)]
        batches = [(tokens.to(engine.device), targets.to(engine.device)) for tokens, targets in batches]
        with meter.step():
            for micro, (tokens, targets) in enumerate(batches):
                loss = engine(tokens, targets)
                engine.backward(loss)
                if micro == accumulation - 1:
                    grad_bytes = measure.gradient_bytes(engine)
                engine.step()
                step_loss += loss.item() / accumulation
        step_times.append(time.perf_counter() - started)
        losses.append(step_loss)
        emit(event="step", rank=rank, step=step + 1, steps=job["steps"], loss=step_loss, seconds=step_times[-1])

    return {
        "rank": rank,
        **measure.model_state_bytes(engine, grad_bytes),
        "peak_memory_bytes": measure.peak_memory_bytes(device),
        "memory_after_initialize_bytes": memory_after_initialize,
        # The first step pays for lazy allocations (Adam states, buckets); the median of the rest is the steady pace.
        "step_time_s": statistics.median(step_times[1:] or step_times),
        "loss": losses,
        "optimizer": type(measure.inner_optimizer(engine)).__name__,
        "wrapper": type(engine.optimizer).__name__,
        "micro_batch": micro_batch,
        "gradient_accumulation_steps": accumulation,
        "measured_traffic": meter.as_dicts(),
    }


def prepare_ops(config):
    """Load (and on first use compile) the C++ ops DeepSpeed will need, announcing each so a build is not silence."""
    from deepspeed.accelerator import get_accelerator
    import deepspeed.ops
    from zerolab.run import op_cache

    names = []
    optimizer = config.get("optimizer") or {}
    zero = config.get("zero_optimization") or {}
    offloaded = ((zero.get("offload_optimizer") or {}).get("device", "none") in ("cpu", "nvme")
                 and int(zero.get("stage", 0)) > 0)
    if str(optimizer.get("type", "")).lower() in ("adam", "adamw", "muon"):  # Muon's other half is an Adam
        if offloaded:
            names.append("CPUAdamBuilder")
        elif not (optimizer.get("params") or {}).get("torch_adam", False):
            names.append("FusedAdamBuilder")
    for name in names:
        builder = get_accelerator().create_op_builder(name)
        if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
            continue
        cache, started = op_cache.state(builder.NAME), time.time()
        emit(event="build", rank=int(os.environ["RANK"]), op=builder.NAME, started=started, **cache)
        builder.load(verbose=False)
        emit(event="built", rank=int(os.environ["RANK"]), op=builder.NAME, seconds=time.time() - started,
             compiled=op_cache.compiled_after(builder.NAME, cache["building_since"] or started),
             build_seconds=time.time() - (cache["building_since"] or started))


def _write(job, name, payload):
    path = os.path.join(job["result_dir"], name)
    with open(path + ".tmp", "w") as handle:
        json.dump(payload, handle)
    os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main(sys.argv[1])
