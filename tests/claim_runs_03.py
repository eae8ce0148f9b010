"""Rank side of tests/test_claims_03.py: real DeepSpeed 0.19.8 engines (and one torch DDP model) on the harness's 2
gloo ranks, every collective recorded as torch.distributed sees it.

Each call is recorded as {"op", "elements", "micro", "phase", "in_backward", "stream"}: the torch.distributed function
and the elements it moves, the micro-step (counted over the whole run), the engine call that was running ("forward",
"backward" or "step"), whether autograd was still computing backward (a gradient hook:
torch._C._current_graph_task_id() != -1), and the stream DeepSpeed had entered with get_accelerator().stream(...):
"default", "side N", or None where it entered none.
"""
import contextlib
import os

CALLS = []
NOW = {"micro": None, "phase": None, "stream": None}
STREAMS = {}  # id(marker) -> name
WIDTH = 64
PERSIST = 100  # stage 3 persistence threshold in elements: the biases (64 or 16) stay whole, the weights do not
PREFETCH = 3000  # stage 3 prefetch bucket in elements: smaller than the 4096-element weights
BUCKET = 5000  # reduce_bucket_size in elements


class Marker:
    """A stand-in for an accelerator stream: CPU ranks have none, so DeepSpeed gets these where it asks for one."""

    def __init__(self, name):
        self.name = name
        STREAMS[id(self)] = name

    def __getattr__(self, attribute):  # synchronize, wait_stream, wait_event, query, ...: nothing to wait for
        return lambda *args, **kwargs: True


def model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH),
                               torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(),
                               torch.nn.Linear(WIDTH, 16))


def watch_collectives():
    """Record the collectives DeepSpeed's comm backend (and DDP's comm hook) call; before DeepSpeed starts its comm
    backend, which keeps references to torch.distributed's all-gather and reduce-scatter."""
    import torch
    import torch.distributed as dist

    def first(*args, **kwargs):
        return args[0] if args else next(iter(kwargs.values()))

    sizes = {"all_reduce": first, "reduce": first, "broadcast": first,
             "all_gather_into_tensor": first, "reduce_scatter_tensor": lambda out, inp, *a, **k: inp,
             "all_gather": lambda outs, *a, **k: torch.cat([t.flatten() for t in outs]),
             "all_to_all_single": first}
    for name, tensor_of in sizes.items():
        original = getattr(dist, name)

        def call(*args, _original=original, _name=name, _tensor_of=tensor_of, **kwargs):
            record = {"op": _name, "elements": _tensor_of(*args, **kwargs).numel(), "micro": NOW["micro"],
                      "phase": NOW["phase"], "in_backward": torch._C._current_graph_task_id() != -1,
                      "stream": NOW["stream"]}
            CALLS.append(record)
            return _original(*args, **kwargs)

        setattr(dist, name, call)


def watch_streams():
    """Give DeepSpeed's ZeRO optimizers streams where they create them (stage_1_and_2.py, stage3.py,
    parameter_offload.py), as an accelerator with streams would, and remember which one is entered when a collective
    runs. Everywhere else the CPU accelerator answers as before (a synchronized device without streams)."""
    import sys

    from deepspeed.accelerator import get_accelerator

    accelerator = get_accelerator()
    plain = type(accelerator)
    default = Marker("default")

    def creating():  # the frame that asks: a ZeRO constructor that creates its streams
        frame = sys._getframe(1)
        while frame.f_code.co_filename == __file__:
            frame = frame.f_back
        return frame.f_code.co_name == "__init__" and frame.f_code.co_filename.endswith(
            ("zero/stage_1_and_2.py", "zero/stage3.py", "zero/parameter_offload.py"))

    class WithStreams(plain):
        def is_synchronized_device(self):
            return False if creating() else plain.is_synchronized_device(self)

        @property
        def Stream(self):
            return (lambda *a, **k: Marker(f"side {len(STREAMS)}")) if creating() else plain.Stream.fget(self)

        def default_stream(self, *args, **kwargs):
            return default if creating() else plain.default_stream(self, *args, **kwargs)

        def stream(self, entered):
            return entering(entered)

    accelerator.__class__ = WithStreams


@contextlib.contextmanager
def entering(entered):
    before = NOW["stream"]
    NOW["stream"] = STREAMS.get(id(entered), before)
    try:
        yield
    finally:
        NOW["stream"] = before


def train(engine, steps, micro_steps, rank):
    import torch

    calls_before = len(CALLS)
    for step in range(steps):
        for micro in range(micro_steps):
            torch.manual_seed(100 * step + 10 * micro + rank)
            x = torch.randn(4, 32, dtype=torch.bfloat16)
            NOW.update(micro=step * micro_steps + micro, phase="forward")
            loss = engine(x).float().pow(2).mean()
            NOW["phase"] = "backward"
            engine.backward(loss)
            NOW["phase"] = "step"
            engine.step()
    NOW.update(micro=None, phase=None)
    return CALLS[calls_before:]


def engine_for(stage, micro_steps, groups=False, **zero):
    import deepspeed

    net = model()
    parameters = net.parameters()
    if groups:  # two parameter groups, as weight decay usually makes them
        parameters = [{"params": [p for p in net.parameters() if p.dim() > 1]},
                      {"params": [p for p in net.parameters() if p.dim() == 1], "weight_decay": 0.0}]
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": micro_steps,
              "bf16": {"enabled": True}, "gradient_clipping": 0.0,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": stage, **zero}}
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=parameters, config=config)
    return net, engine


def ddp_schedule(rank):
    """torch's DistributedDataParallel, 2 micro-steps a step, without and with no_sync() on the first: the comm
    hook's calls per backward (it runs where DDP would all-reduce a bucket)."""
    import torch
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    net = torch.nn.parallel.DistributedDataParallel(model())
    seen = []

    def hook(state, bucket):
        seen.append(NOW["micro"])
        return allreduce_hook(state, bucket)

    net.register_comm_hook(None, hook)
    schedules = {}
    for name, quiet_first in (("plain", False), ("no_sync", True)):
        seen.clear()
        for micro in range(2):
            NOW["micro"] = micro
            x = torch.randn(4, 32)
            context = net.no_sync() if quiet_first and micro == 0 else contextlib.nullcontext()
            with context:
                net(x).pow(2).mean().backward()
        schedules[name] = [seen.count(0), seen.count(1)]
    NOW["micro"] = None
    return schedules


def collectives(job, namespace):
    """Everything tests/test_claims_03.py reads, from one set of ranks."""
    import deepspeed.comm as ds_dist
    import torch

    from zerolab.run.op_cache import skip_shm_comm_op

    rank = int(os.environ["RANK"])
    watch_collectives()
    skip_shm_comm_op()
    watch_streams()
    out = {"ddp": ddp_schedule(rank), "cases": {}}

    def case(name, stage, micro_steps=2, steps=1, groups=False, **zero):
        net, engine = engine_for(stage, micro_steps, groups=groups, **zero)
        record = {"params": sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in net.parameters()),
                  "sizes": [p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in net.parameters()]}
        optimizer = engine.optimizer
        if stage in (1, 2):
            record["bucket_buffers"] = [[t.numel() for t in b.buffer] for b in optimizer.ipg_buckets.values()]
            setup = optimizer.setup_buckets
            seen = []

            def setup_and_look():
                setup()
                seen.append([t.numel() for b in optimizer.ipg_buckets.values() for t in b.buffer])

            optimizer.setup_buckets = setup_and_look
            record["groups"] = len(optimizer.bit16_groups)
            record["streams"] = {"reduce": STREAMS.get(id(optimizer.reduction_stream))}
        if stage == 3:
            record["persist"] = [[p.ds_numel, bool(p.ds_persist)] for p in net.parameters()]
            coordinator = optimizer.parameter_offload.get_param_coordinator()
            record["streams"] = {
                "reduce": STREAMS.get(id(optimizer.reduce_and_partition_stream)),
                "all_gather": STREAMS.get(id(coordinator._PartitionedParameterCoordinator__allgather_stream))}
        record["calls"] = train(engine, steps, micro_steps, rank)
        if stage in (1, 2):
            record["bucket_buffers_in_backward"] = seen
        out["cases"][name] = record

    case("stage0", 0)
    case("stage1", 1, reduce_bucket_size=BUCKET)
    case("stage1_overlap", 1, reduce_bucket_size=BUCKET, overlap_comm=True)
    case("stage2", 2, groups=True, reduce_bucket_size=BUCKET, allgather_bucket_size=100)
    case("stage3", 3, steps=2, reduce_bucket_size=BUCKET, stage3_param_persistence_threshold=PERSIST,
         stage3_prefetch_bucket_size=PREFETCH)
    case("stage3_no_overlap", 3, micro_steps=1, overlap_comm=False, reduce_bucket_size=BUCKET,
         stage3_param_persistence_threshold=PERSIST)
    out["has_all_gather_into_tensor"] = ds_dist.has_all_gather_into_tensor()
    out["torch"] = torch.__version__
    return out
