"""Rank side of tests/test_claims_06.py: on the harness's 2 gloo ranks, DeepSpeed 0.19.8 started from the environment
alone (no launcher), then real ZeRO engines watched from their own tensors after every backward and step."""
import os

WIDTH = 64


class NoMpi(RuntimeError):
    """Raised in place of DeepSpeed's MPI discovery, which needs mpi4py and an MPI launch."""


def model():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH),
                               torch.nn.ReLU(), torch.nn.Linear(WIDTH, 16))


def start_from_the_environment():
    """Leave the harness's process group and let deepspeed.init_distributed start one from RANK, LOCAL_RANK,
    WORLD_SIZE, MASTER_ADDR and MASTER_PORT: first without LOCAL_RANK (what does DeepSpeed do then?), then with all
    five, on a fresh port rank 0 chose."""
    import deepspeed
    import deepspeed.comm.comm as ds_comm
    import torch
    import torch.distributed as dist

    from zerolab.run.launch import free_port
    from zerolab.run.op_cache import skip_shm_comm_op

    port = torch.tensor([free_port() if dist.get_rank() == 0 else 0])
    dist.broadcast(port, 0)
    dist.barrier()
    dist.destroy_process_group()
    os.environ["MASTER_PORT"] = str(int(port))
    skip_shm_comm_op()
    discovered = []

    def mpi_discovery(*args, **kwargs):
        discovered.append(True)
        raise NoMpi("MPI discovery")

    real_discovery, ds_comm.mpi_discovery = ds_comm.mpi_discovery, mpi_discovery
    local_rank = os.environ.pop("LOCAL_RANK")
    try:
        deepspeed.init_distributed(dist_backend="gloo")
        without = "started"
    except NoMpi:
        without = "MPI discovery"
    finally:
        os.environ["LOCAL_RANK"] = local_rank
    assert not dist.is_initialized()
    deepspeed.init_distributed(dist_backend="gloo")
    ds_comm.mpi_discovery = real_discovery
    ranks = torch.tensor([dist.get_rank()])
    dist.all_reduce(ranks)
    return {"without_local_rank": without, "discovery_calls": len(discovered), "rank": dist.get_rank(),
            "world_size": dist.get_world_size(), "sum_of_ranks": int(ranks), "env_rank": int(os.environ["RANK"]),
            "port": int(port)}


def grads_held(net, optimizer):
    """Elements and dtypes of every gradient the module and the ZeRO-1/2 optimizer hold right now."""
    averaged = [t for value in (getattr(optimizer, "averaged_gradients", None) or {}).values()
                for t in ([value] if hasattr(value, "numel") else (value or [])) if t is not None]
    fp32 = [g.grad for g in optimizer.single_partition_of_fp32_groups if g.grad is not None]
    host = list((getattr(optimizer, "accumulated_grads_in_cpu", None) or {}).values())
    return {"module": sum(p.grad.numel() for p in net.parameters() if p.grad is not None),
            "partition_16bit": sum(t.numel() for t in averaged), "partition_16bit_dtypes": dtypes(averaged),
            "fp32": sum(g.numel() for g in fp32), "fp32_dtypes": dtypes(fp32),
            "host_accumulation": sum(t.numel() for t in host), "host_accumulation_dtypes": dtypes(host)}


def dtypes(tensors):
    return sorted({str(t.dtype) for t in tensors})


def optimizer_side(optimizer):
    """Bytes of the fp32 master partition and of Adam's moments (all tensor state but the step), and the elements
    of the rank's partition."""
    import torch

    masters = getattr(optimizer, "single_partition_of_fp32_groups", None) or optimizer.fp32_partitioned_groups_flat
    inner = optimizer.optimizer
    moments = [v for state in inner.state.values() for k, v in state.items() if torch.is_tensor(v) and k != "step"]
    return {"master_bytes": sum(m.numel() * m.element_size() for m in masters),
            "master_dtypes": dtypes(masters),
            "moment_bytes": sum(v.numel() * v.element_size() for v in moments),
            "moment_dtypes": dtypes(moments),
            "moments_per_parameter": sorted({sum(torch.is_tensor(v) and k != "step" for k, v in s.items())
                                             for s in inner.state.values()}),
            "partition": sum(m.numel() for m in masters)}


def watch(stage, micro_steps, rank, **zero):
    import deepspeed
    import torch

    net = model()
    params = sum(p.numel() for p in net.parameters())
    config = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": micro_steps,
              "bf16": {"enabled": True}, "steps_per_print": 10**9,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": stage, **zero}}
    engine, _, _, _ = deepspeed.initialize(model=net, model_parameters=net.parameters(), config=config)
    optimizer = engine.optimizer
    record = {"optimizer": type(optimizer).__name__, "params": params,
              "partition_gradients": getattr(optimizer, "partition_gradients", None),
              "after_backward": [], "after_step": []}
    for micro in range(2 * micro_steps):
        torch.manual_seed(10 * micro + rank)
        engine.backward(engine(torch.randn(4, 32, dtype=torch.bfloat16)).float().pow(2).mean())
        if stage < 3:
            record["after_backward"].append(grads_held(net, optimizer))
        engine.step()
        if stage < 3:
            record["after_step"].append(grads_held(net, optimizer))
    record["optimizer_side"] = optimizer_side(optimizer)
    return record


def engines(job, namespace):
    """Everything tests/test_claims_06.py reads, from one set of ranks."""
    rank = int(os.environ["RANK"])
    out = {"environment": start_from_the_environment()}
    out["stage1"] = watch(1, 2, rank)
    out["stage2"] = watch(2, 2, rank)
    out["stage2_offload"] = watch(2, 2, rank, offload_optimizer={"device": "cpu", "pin_memory": False})
    out["stage3"] = watch(3, 1, rank, stage3_param_persistence_threshold=0)
    return out
