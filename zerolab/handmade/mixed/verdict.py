"""Judge the learner's mixed-precision ZeRO-1 (bf16 compute, fp32 master shard, clipping by the global norm).

In this order: who owns what; the master shard (there, one fp32 1-D tensor per owned range); the norm step()
returned every step (a float), against torch.nn.utils.clip_grad_norm_ on the whole model in one process; the bf16
parameters refreshed from the master; the fp32 master after every step against the one-process fp32-master
reference (zerolab.handmade.mixed.model), within MASTER_ATOL, with the classic mistakes simulated to name them;
ranks that agree; all-gathers no larger than N shares.

Every step is judged from the learner's own state before it (``mixed_model.reference_fed``): bf16 rounding makes
whole runs of two right answers drift apart, so a comparison after the last step alone failed right answers
written in another arithmetic order, and passed or failed them by luck.
"""
import math

from zerolab.handmade.mixed import model as mixed_model
from zerolab.handmade.core import model as fixed
from zerolab.handmade.zero1 import verdict
from zerolab.handmade.zero2 import verdict as zero2_verdict
from zerolab.handmade.core.partition import flat_partition, share_size

# Measured: fed the learner's state, one step of a right answer is within 1e-8 of the reference's (the ranks sum
# the same fp32 gradients in another order, the AdamW terms come in other orders); clipping per shard moves it
# by 1e-4 or more, a master kept in bf16 by about the learning rate.
MASTER_ATOL = 1e-5
NORM_RTOL = 1e-4


def problem(results, hyper, steps, max_grad_norm):
    world_size = len(results)
    numels = fixed.numels(fixed.build())
    shares = flat_partition(numels, world_size)
    return (zero2_verdict.ownership(results, numels, shares, "MixedShardedAdamW") or _master_shape(results, shares)
            or _norms(results, hyper, steps, max_grad_norm) or _refreshed(results)
            or _master_values(results, hyper, steps, max_grad_norm)
            or verdict._drift_problem([r["params"] for r in results], steps) or _all_gathered(results, numels))


def _all_gathered(results, numels):
    """Refreshing the bf16 parameters all-gathers each rank's share: N shares of the padded flat length, no more."""
    world_size = len(results)
    most = world_size * share_size(sum(numels), world_size)
    for rank, result in enumerate(results):
        for step, rows in enumerate(result["traffic"]):
            gathered = sum(row["elements"] for row in rows if row["op"] == "all-gather")
            if gathered > most:
                return (f"traffic: in step {step} rank {rank} all-gathers {gathered} elements; refreshing the bf16 "
                        f"parameters takes {world_size} shares, {most} elements: each rank sends a buffer the size "
                        "of the longest share, not more")
    return None


def _master_shape(results, shares):
    for rank, result in enumerate(results):
        master = next((m for m in result["masters_after"] if not isinstance(m, dict)), result["master"])
        if not isinstance(master, dict):
            return (f"missing attribute: rank {rank}'s optimizer has no `master` list of 1-D tensors (found "
                    f"{master}); the tests read the fp32 master shard from it, one tensor per range of `owned`")
        wanted = [end - start for _, start, end in shares[rank]]
        master = next((m for m in result["masters_after"] if m["lengths"] != wanted), master)
        if master["lengths"] != wanted:
            return (f"wrong shape: rank {rank}'s `master` holds tensors of {master['lengths']} elements; `owned` "
                    f"has ranges of {wanted}")
        low = [dtype for dtype in master["dtypes"] if dtype != "float32"]
        if low:
            return (f"bf16 master weights: rank {rank} keeps its master shard in {low[0]}; updates smaller than "
                    "its precision are lost, so the master must be fp32")
    return None


def _before_each_step(results):
    """(flat bf16 parameters, flat fp32 master) that the learner's ranks held before each step: the model as
    built before the first, then what rank 0 held and what the ranks' masters were after the step before."""
    start = fixed.flat(mixed_model.build())
    before = [(start, start)]
    for step in range(len(results[0]["params_after"]) - 1):
        master = [value for result in results for value in result["masters_after"][step]["values"]]
        before.append((results[0]["params_after"][step], master))
    return before


def _fed(results, hyper, max_grad_norm, mistake=None):
    return mixed_model.reference_fed(hyper, len(results), max_grad_norm, _before_each_step(results), mistake)


def _norms(results, hyper, steps, max_grad_norm):
    world_size = len(results)
    for rank, result in enumerate(results):
        for step, got in enumerate(result["norms"]):
            if not isinstance(got, float):
                return (f"missing return: step() returned {got} in step {step} on rank {rank}; it returns the "
                        "gradient's global norm before clipping (a float), as torch.nn.utils.clip_grad_norm_ does")
    _, want = _fed(results, hyper, max_grad_norm)
    for rank, result in enumerate(results):
        for step, (got, norm) in enumerate(zip(result["norms"], want)):
            if math.isclose(got, norm, rel_tol=NORM_RTOL):
                continue
            _, own = _fed(results, hyper, max_grad_norm, "per shard")
            if math.isclose(got, own[step][rank], rel_tol=NORM_RTOL):
                return (f"clipping per shard: in step {step} rank {rank}'s norm is the norm of its own share of the "
                        "gradient, not of the whole gradient over every rank's share")
            if math.isclose(got, norm * world_size, rel_tol=NORM_RTOL):
                return f"wrong scale: the gradients are summed over the {world_size} ranks, not averaged"
            return (f"wrong norm: in step {step} rank {rank}'s step() returned a norm that differs from "
                    f"torch.nn.utils.clip_grad_norm_'s on the whole averaged gradient by {abs(got / norm - 1):.1e} "
                    f"of it (tolerance {NORM_RTOL:g})")
    return None


def _gaps(results, fed):
    """Per step, the largest difference between the learner's fp32 master after it and ``fed``'s."""
    return [verdict._max_gap([value for result in results for value in result["masters_after"][step]["values"]],
                             want) for step, want in enumerate(fed)]


def _master_values(results, hyper, steps, max_grad_norm):
    gaps = _gaps(results, _fed(results, hyper, max_grad_norm)[0])
    gap = max(gaps)
    if gap <= MASTER_ATOL:
        return None
    first = next(step for step, step_gap in enumerate(gaps) if step_gap > MASTER_ATOL)
    for mistake, message in (
            ("per shard", "clipping per shard: each rank scales its share of the gradient by its own share's norm, "
                          "not by the global norm"),
            ("bf16 master", "bf16 master weights: the fp32 master holds no more than the bf16 parameters (is it "
                            "rebuilt from them?); updates smaller than bf16's precision are lost"),
            ("no clipping", "clipping missing: the master moves as if the gradient were never scaled down to "
                            "max_grad_norm"),
            ("bf16 sum", "bf16 reduction: the gradients are summed over the ranks in bf16 (DeepSpeed's default "
                         "communication dtype), which rounds what this exercise averages in fp32")):
        if max(_gaps(results, _fed(results, hyper, max_grad_norm, mistake)[0])) < gap / 10:
            return message
    return (f"wrong training: in step {first} the fp32 master moves differently from the fp32-master reference's "
            f"step taken from your state before it (torch.optim.AdamW after torch.nn.utils.clip_grad_norm_): by up "
            f"to {gaps[first]:.2e} (tolerance {MASTER_ATOL:g})")


def _refreshed(results):
    import torch

    master = torch.tensor([value for result in results for value in result["master"]["values"]])
    rounded = master.to(mixed_model.COMPUTE).float().tolist()
    for rank, result in enumerate(results):
        if result["param_dtypes"] != ["bfloat16"]:
            return (f"wrong dtype: rank {rank}'s model parameters are {result['param_dtypes']} after training; the "
                    "model computes in bf16")
        if verdict._max_gap(result["params"], rounded) > 0:
            return (f"stale parameters: rank {rank}'s bf16 parameters are not its fp32 master rounded to bf16; the "
                    "bf16 copy is refreshed from the master after each step")
    return None
