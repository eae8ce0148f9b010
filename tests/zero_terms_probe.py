"""One rank of tests/test_zero_terms_measured.py: real DeepSpeed ZeRO engines on CPU ranks, watched from inside.

Run by torch.distributed.run with 2 ranks: ``python -m torch.distributed.run --nproc_per_node 2 THIS OUT_DIR``.
For each case it trains the tiny GPT of zerolab.run for 3 steps and records, from DeepSpeed's own objects:
- whether the fp32 gradient partition exists after backward, inside ``_optimizer_step`` (its size and dtype), and
  after ``step()`` (stage 1/2: ``single_partition_of_fp32_groups[i].grad``; stage 3:
  ``fp32_partitioned_groups_flat[i].grad``), and the flat copies ``step()`` makes with ``self.flatten``;
- the reduce buckets: at stage 1/2 the buffers each bucket holds when ``reduce_ipg_grads`` runs and after backward;
  at stage 3 the buffer of each communication dtype;
- at stage 1 with optimizer offload, the same fp32 gradient partition (lesson 02: offloaded at stage 1 too);
- at stage 1 with overlap_comm off and 2 micro-steps a step, the elements of the gradients the module holds in
  ``.grad`` after each micro-step's backward and step;
- the elements of every all-reduce and all-gather of each step (lesson 08's "Alignment");
- with bf16 master weights and optimizer states (stages 1-3), the same gradient the optimizer reads inside
  ``_optimizer_step``, and whether it is the flat copy ``step()`` made (the same storage);
- at stage 3, the most parameter elements gathered at once (``ds_status`` not NOT_AVAILABLE), sampled after every
  ``PartitionedParameterCoordinator.fetch_sub_module``.
Writes OUT_DIR/rank<r>.json.
"""
import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import deepspeed  # noqa: E402
import torch  # noqa: E402
from deepspeed.runtime.zero import partitioned_param_coordinator as coordinator  # noqa: E402
from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus  # noqa: E402

from zerolab.run import make_config  # noqa: E402
from zerolab.run.model import ModelSpec, TinyGPT, synthetic_batch  # noqa: E402
from zerolab.run.op_cache import skip_shm_comm_op  # noqa: E402

SPEC = ModelSpec(layers=4, width=64)
# An odd width makes Ψ (212,058) not a multiple of 2N = 4, so the flat buffer's padding shows in the collectives.
ODD_SPEC = ModelSpec(layers=4, width=63, heads=3)
BUCKET = 4096  # elements: small enough that the tiny GPT fills several buckets


def config(stage, **zero):
    cfg = make_config(stage, precision="bf16")
    cfg["zero_optimization"].update(overlap_comm=True, contiguous_gradients=True, reduce_bucket_size=BUCKET, **zero)
    return cfg


def accumulating_stage1():
    """Stage 1 as DeepSpeed leaves it (overlap_comm off), 2 micro-steps a step: lesson 06's "Stage 1 gradients"."""
    cfg = make_config(1, precision="bf16", accumulation=2)
    cfg["zero_optimization"].update(overlap_comm=False)
    return cfg


def bf16_master(stage):
    cfg = config(stage)
    cfg["bf16"].update(bf16_master_weights_and_grads=True, bf16_optimizer_states=True)
    return cfg


CASES = {
    "stage1": config(1),
    "stage1_accumulating": accumulating_stage1(),
    "stage1_offload": make_config(1, offload_optimizer="cpu", precision="bf16"),
    "stage2": config(2),
    "stage2_odd": config(2),
    "stage3": config(3),
    "stage3_live": config(3, stage3_max_live_parameters=20_000, stage3_max_reuse_distance=20_000,
                          stage3_prefetch_bucket_size=5_000),
    **{f"stage{stage}_bf16_master": bf16_master(stage) for stage in (1, 2, 3)},
}


def _grads_of(optimizer):
    """The gradient each partition of master weights holds (None where it has none)."""
    groups = getattr(optimizer, "single_partition_of_fp32_groups", None)
    if groups is None:
        groups = optimizer.fp32_partitioned_groups_flat
    return [g.grad for g in groups]


def fp32_grads(optimizer):
    groups = getattr(optimizer, "single_partition_of_fp32_groups", None)
    if groups is None:
        groups = optimizer.fp32_partitioned_groups_flat
    return [None if g.grad is None else {"numel": g.grad.numel(), "dtype": str(g.grad.dtype), "size": g.numel()}
            for g in groups]


def held_grads(model):
    """Elements of the 16-bit gradients the module's parameters hold in .grad (full tensors, not partitions)."""
    return sum(p.grad.numel() for p in model.parameters() if p.grad is not None)


def run_case(name, cfg):
    torch.manual_seed(0)
    spec = ODD_SPEC if name.endswith("_odd") else SPEC
    model = TinyGPT(spec)
    gathered = {"most": 0}
    original_fetch = coordinator.PartitionedParameterCoordinator.fetch_sub_module

    def fetch_and_count(self, submodule, forward):
        original_fetch(self, submodule, forward)
        live = sum(p.ds_numel for p in model.parameters() if p.ds_status != ZeroParamStatus.NOT_AVAILABLE)
        gathered["most"] = max(gathered["most"], live)

    coordinator.PartitionedParameterCoordinator.fetch_sub_module = fetch_and_count
    try:
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
        optimizer = engine.optimizer
        record = {"after_backward": [], "in_step": [], "reads_the_flat_copy": [], "after_step": [],
                  "buckets_in_backward": [],
                  "buckets_after_backward": [], "stage3_buckets": []}
        original_step = optimizer._optimizer_step

        def step_and_look(*args, **kwargs):
            record["in_step"].append(fp32_grads(optimizer))
            # is the gradient the optimizer reads the flat 16-bit copy itself (no copy in the master's dtype)?
            last = stepping.get("last_flat")
            record["reads_the_flat_copy"].append([
                group is not None and last is not None and group.untyped_storage().data_ptr() ==
                last.untyped_storage().data_ptr() for group in _grads_of(optimizer)])
            return original_step(*args, **kwargs)

        optimizer._optimizer_step = step_and_look
        record["flat_in_step"] = []
        stepping = {"now": False}
        original_flatten, original_opt_step = optimizer.flatten, optimizer.step

        def flatten_and_look(tensors):
            flat = original_flatten(tensors)
            if stepping["now"]:
                record["flat_in_step"].append({"numel": flat.numel(), "dtype": str(flat.dtype)})
                stepping["last_flat"] = flat
            return flat

        def opt_step(*args, **kwargs):
            stepping["now"] = True
            try:
                return original_opt_step(*args, **kwargs)
            finally:
                stepping["now"] = False

        optimizer.flatten, optimizer.step = flatten_and_look, opt_step
        if hasattr(optimizer, "reduce_ipg_grads") and cfg["zero_optimization"]["stage"] < 3:
            original_reduce = optimizer.reduce_ipg_grads

            def reduce_and_look(*args, **kwargs):
                record["buckets_in_backward"].append([len(b.buffer) for b in optimizer.ipg_buckets.values()])
                return original_reduce(*args, **kwargs)

            optimizer.reduce_ipg_grads = reduce_and_look
        record["held_grads_after_backward"], record["held_grads_after_step"], record["collectives"] = [], [], []
        for step in range(2 * cfg["gradient_accumulation_steps"] if cfg["gradient_accumulation_steps"] > 1 else 3):
            tokens, targets = synthetic_batch(spec, 2, step, int(os.environ["RANK"]))
            CALLS.clear()
            engine.backward(engine(tokens, targets))
            record["held_grads_after_backward"].append(held_grads(model))
            record["after_backward"].append(fp32_grads(optimizer))
            if cfg["zero_optimization"]["stage"] < 3:
                record["buckets_after_backward"].append([len(b.buffer) for b in optimizer.ipg_buckets.values()])
            else:
                record["stage3_buckets"].append({str(dtype): [b.buffer.numel()] if torch.is_tensor(b.buffer) else
                                                 [t.numel() for t in b.buffer]
                                                 for dtype, b in optimizer.ipg_buckets.items()})
            engine.step()
            record["collectives"].append(list(CALLS))
            record["held_grads_after_step"].append(held_grads(model))
            record["after_step"].append(fp32_grads(optimizer))
        record["gathered_most"] = gathered["most"]
        record["params"] = sum(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
        record["largest_param"] = max(p.ds_numel if hasattr(p, "ds_numel") else p.numel() for p in model.parameters())
        record["partition_sizes"] = [int(n) for n in getattr(optimizer, "partition_size", [])]
        return record
    finally:
        coordinator.PartitionedParameterCoordinator.fetch_sub_module = original_fetch


CALLS = []  # (op, elements) of every all-reduce and all-gather since the last clear, as torch.distributed sees it


def watch_collectives():
    """Record each all-reduce's and all-gather's elements. Before init_distributed: DeepSpeed's comm backend keeps
    a reference to torch.distributed's all-gather from then on."""
    import torch.distributed as dist

    def watched(name, op, tensor_of):
        original = getattr(dist, name)

        def call(*args, **kwargs):
            CALLS.append((op, tensor_of(*args, **kwargs).numel()))
            return original(*args, **kwargs)

        setattr(dist, name, call)

    watched("all_reduce", "all-reduce", lambda tensor, *a, **k: tensor)
    watched("all_gather_into_tensor", "all-gather", lambda output_tensor, *a, **k: output_tensor)


def main(out_dir):
    torch.set_num_threads(1)
    watch_collectives()
    skip_shm_comm_op()  # as the course's runs: else the first probe of a fresh clone compiles it for a minute
    deepspeed.init_distributed(dist_backend="gloo")
    results = {name: run_case(name, cfg) for name, cfg in CASES.items()}
    with open(os.path.join(out_dir, f"rank{os.environ['RANK']}.json"), "w") as handle:
        json.dump(results, handle)


if __name__ == "__main__":
    main(sys.argv[1])
