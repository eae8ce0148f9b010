"""ZeRO++'s hpZ on real ranks (lesson 10): 4 CPU ranks as 2 "nodes" of 2, plain ZeRO-3 against hpZ.

``compare()`` starts 4 CPU ranks (zerolab.run.launch, so an identical job comes from $ZEROLAB_RUN_CACHE when it is
set). Each rank (``python -m zerolab.run.hpz JOB.json``) trains the tiny GPT under ZeRO-3 twice from the same seed:
once plain, once with ``zero_hpz_partition_size`` 2, so that ranks {0, 1} and {2, 3} each keep a second copy of the
parameters, sharded over the node only. Plain runs first: DeepSpeed 0.19.8 keeps the hpZ process group in a module
global (deepspeed.utils.groups), which a later engine in the same process would pick up.

Both runs are in the regime the ZeRO++ paper counts: ``stage3_max_reuse_distance`` 0 and
``stage3_prefetch_bucket_size`` 0, so backward gathers each parameter again instead of keeping it from forward (with
DeepSpeed's defaults a model this small stays gathered from forward to backward, and hpZ has nothing to save).

Every collective that reaches DeepSpeed's communication backend is recorded with its process group. Per rank and for
the last optimizer step the result holds, per run, the bytes of the collectives whose group spans both nodes
("cross-node") and of those inside one node, each by op, the loss of every step, and the elements of the secondary
(hpZ) partition a rank held after the last backward. Bytes are the whole collective's buffer, as in
zerolab.run.meter: the ZeRO++ paper's M is such a buffer, the 16-bit model.
"""
from zerolab.run.worker import emit, serve, start_cpu_rank

RANKS = 4
NODE = 2  # ranks per "node": the hpZ group
STEPS = 2
MODES = {"ZeRO-3": 1, "ZeRO-3 + hpZ": NODE}  # name: zero_hpz_partition_size
PAPER_REGIME = {"stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": 0}
# Where the process group sits among a TorchBackend method's positional parameters (deepspeed/comm/torch.py)
GROUP_POSITION = {"all_reduce": 2, "inference_all_reduce": 2, "all_reduce_coalesced": 2, "reduce": 3,
                  "reduce_scatter": 3, "broadcast": 2, "all_gather": 2, "all_gather_into_tensor": 2,
                  "all_gather_base": 2, "all_gather_coalesced": 2, "reduce_scatter_tensor": 3, "all_to_all_single": 4}


def job(steps=STEPS):
    from zerolab.run.configs import make_config
    from zerolab.run.model import ModelSpec

    configs = {}
    for mode, size in MODES.items():
        config = make_config(stage=3)
        config["zero_optimization"].update(PAPER_REGIME, zero_hpz_partition_size=size)
        configs[mode] = config
    return {"configs": configs, "model": ModelSpec().as_dict(), "steps": steps, "device": "cpu"}


def compare(steps=STEPS, progress=True):
    """[per rank] {mode: {"cross_node": {op: bytes}, "in_node": {op: bytes}, "losses": [...],
    "secondary_elements": int, "primary_elements": int}} of a real run on 4 CPU ranks."""
    from zerolab.run.launch import launch

    return launch(job(steps), RANKS, timeout=300, progress=progress, worker="zerolab.run.hpz")


def crosses_nodes(ranks, node=NODE):
    return len({rank // node for rank in ranks}) > 1


def table(results, rank=0):
    """Bytes per optimizer step of one rank, by where the collective's group reaches, as text: the all-gathers and
    reduce-scatters that move the model, and the rest (the gradient norm's all-reduce, the broadcast of the recorded
    fetch order), which do not grow with it."""
    from zerolab.base.i18n import tr

    rows = [[tr("run"), tr("all-gather across nodes"), tr("reduce-scatter across nodes"), tr("other across nodes"),
             tr("all-gather inside a node")]]
    for mode, found in results[rank].items():
        cross = found["cross_node"]
        other = sum(nbytes for op, nbytes in cross.items() if op not in ("all-gather", "reduce-scatter"))
        rows.append([mode, f"{cross.get('all-gather', 0):,}", f"{cross.get('reduce-scatter', 0):,}", f"{other:,}",
                     f"{found['in_node'].get('all-gather', 0):,}"])
    from zerolab.run.report import aligned

    return aligned(rows)


def main(job_path):
    serve(job_path, run_job)


def run_job(job, rank):
    import torch

    from zerolab.run.model import ModelSpec, TinyGPT, synthetic_batch

    deepspeed = start_cpu_rank()
    import deepspeed.comm.comm as ds_comm

    recorder = _GroupRecorder(ds_comm.cdb)
    spec = ModelSpec(**job["model"])
    found = {}
    for mode, config in job["configs"].items():
        emit(event="phase", rank=rank, phase=mode)
        torch.manual_seed(0)
        model = TinyGPT(spec)
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
        losses, secondary = [], 0
        for step in range(job["steps"]):
            recorder.rows = {}  # the last step's collectives are kept
            recorder.on = True
            tokens, targets = synthetic_batch(spec, engine.train_micro_batch_size_per_gpu(), step, rank)
            loss = engine(tokens, targets)
            engine.backward(loss)
            secondary = sum(p.ds_secondary_tensor.numel() for p in engine.module.parameters()
                            if getattr(p, "ds_secondary_tensor", None) is not None)  # step() frees them
            engine.step()
            recorder.on = False
            losses.append(float(loss))
        cross, inside = {}, {}
        for (op, ranks), nbytes in recorder.rows.items():
            where = cross if crosses_nodes(ranks) else inside
            where[op] = where.get(op, 0) + nbytes
        found[mode] = {"cross_node": cross, "in_node": inside, "losses": losses, "secondary_elements": secondary,
                       "primary_elements": sum(p.ds_tensor.numel() for p in engine.module.parameters())}
        del engine
    return found


class _GroupRecorder:
    """Bytes of every collective that reaches DeepSpeed's backend, by (op, ranks of its process group)."""

    def __init__(self, backend):
        import torch.distributed as dist

        from zerolab.run.meter import COLLECTIVES, _numel

        self.rows, self.on, self._depth = {}, False, 0
        world = tuple(range(dist.get_world_size()))
        for name, (op, argument, position) in COLLECTIVES.items():
            original = getattr(backend, name, None)
            if original is None:
                continue

            def recorded(*args, _original=original, _name=name, _op=op, _argument=argument, _position=position,
                         **kwargs):
                if self.on and self._depth == 0:
                    value = kwargs.get(_argument, args[_position] if len(args) > _position else None)
                    group = kwargs.get("group", args[GROUP_POSITION[_name]] if len(args) > GROUP_POSITION[_name]
                                       else None)
                    ranks = tuple(dist.get_process_group_ranks(group)) if group is not None else world
                    elements, dtype = _numel(value)
                    key = (_op, ranks)
                    self.rows[key] = self.rows.get(key, 0) + elements * (dtype.itemsize if dtype is not None else 0)
                self._depth += 1
                try:
                    return _original(*args, **kwargs)
                finally:
                    self._depth -= 1

            setattr(backend, name, recorded)


if __name__ == "__main__":
    import sys

    main(sys.argv[1])
