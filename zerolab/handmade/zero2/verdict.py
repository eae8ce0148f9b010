"""Judge the learner's ZeRO-2 (gradients reduced from hooks, a bucket at a time) from what the ranks measured.

In this order, each failing with one message that names the mistake: who owns what; the averaged gradient
shards after every backward (each step's against the full-batch gradient at the parameters that backward
started from); gradient memory (full gradients left, then the measured peak against the rank's share plus
one bucket plus the largest parameter); traffic during backward (the ZeRO paper's volume, counted at the
collectives: near Psi for gradients reduced to their owners, 2 Psi for an all-reduce); training equal to
torch.optim.AdamW on the full batch.
"""
from zerolab.handmade.core import model as fixed
from zerolab.handmade.zero1 import verdict
from zerolab.handmade.zero2 import model as deep
from zerolab.handmade.core.partition import flat_partition
from zerolab.handmade.core.traffic import volume

MEMORY_SLACK_BYTES = 256  # a few scalars: counters, a norm
TRAFFIC_LIMIT = 1.5  # x Psi: reduced to owners is 1 (padded pieces a little more); an all-reduce is 2


def problem(results, hyper, steps, bucket_elements):
    world_size = len(results)
    numels = fixed.numels(deep.build())
    shares = flat_partition(numels, world_size)
    return (ownership(results, numels, shares, "Zero2Gradients") or _shards(results, numels, shares)
            or _memory(results, numels, shares, bucket_elements) or _traffic(results, numels)
            or _training(results, hyper, steps))


def ownership(results, numels, shares, name):
    """Every rank's ``owned`` there, consistent across ranks, and partition's; or the message naming what is not."""
    for rank, result in enumerate(results):
        if result["owned"] is None:
            return (f"missing attribute: rank {rank}'s {name} has no `owned` list of (param_index, start, end); the "
                    "tests read which elements each rank keeps from it")
    found = verdict.ownership_problem([r["owned"] for r in results], numels)
    if found:
        return found
    for rank, result in enumerate(results):
        if [tuple(r) for r in result["owned"]] != [tuple(r) for r in shares[rank]]:
            return (f"wrong owners: rank {rank}'s `owned` is not what partition(numels, world_size) gives for rank "
                    f"{rank}; the tests take the owners from partition")
    return None


def _shards(results, numels, shares):
    world_size = len(results)
    offsets = [sum(numels[:i]) for i in range(len(numels))]
    summed = False
    for step in range(min(len(result["steps"]) for result in results)):
        full = deep.full_gradient(step=step, params=results[0]["steps"][step]["started_from"])
        when = "after backward" if step == 0 else f"after the backward of step {step}"
        for rank, result in enumerate(results):
            for index, start, end in shares[rank]:
                shard = result["steps"][step]["shards"][index]
                if not isinstance(shard, list):
                    return (f"missing shard: {when}, parameter {index} has no grad_shard (a 1-D tensor) on rank "
                            f"{rank}, which owns {end - start} of its elements (found {shard or 'None'})"
                            + ("" if step == 0 else "; the first backward left one: is every backward's last "
                                                    "bucket sent?"))
                if len(shard) != end - start:
                    return (f"wrong shard size: {when}, rank {rank}'s grad_shard of parameter {index} has "
                            f"{len(shard)} elements; the rank owns {end - start} of that parameter")
                want = full[offsets[index] + start:offsets[index] + end]
                if verdict._max_gap(shard, want) > verdict.ATOL:
                    if verdict._max_gap(shard, [world_size * w for w in want]) <= verdict.ATOL * world_size:
                        summed = True
                        continue
                    return (f"wrong values: {when}, rank {rank}'s grad_shard of parameter {index} is not the "
                            "averaged gradient of the elements it owns"
                            + ("" if step == 0 else " in that step; the first backward's was: is every backward's "
                                                    "last bucket sent?"))
        if summed:
            return f"wrong scale: the gradients are summed over the {world_size} ranks, not averaged"
    return None


def _memory(results, numels, shares, bucket_elements):
    for rank, result in enumerate(results):
        for step, seen in enumerate(result["steps"]):
            kept = [index for index, has in enumerate(seen["grads"]) if has]
            if kept:
                when = "after backward" if step == 0 else f"after the backward of step {step}"
                return (f"memory: {when} parameter {kept[0]} still has its full .grad on rank {rank}; the full "
                        "gradients are not freed once their bucket is reduced")
    for rank, result in enumerate(results):
        budget = memory_budget(numels, len(results), rank, bucket_elements)
        if result["memory_peak"] > budget:
            return (f"memory: during backward rank {rank} held up to {result['memory_peak']} bytes of gradients "
                    f"({result['memory_where']}); its share, one bucket of {bucket_elements} elements and the largest "
                    f"parameter take {budget} bytes: more than one bucket's worth of gradients, or of copies of "
                    "them, was alive at once")
    return None


def memory_budget(numels, world_size, rank, bucket_elements):
    """Bytes of gradient memory a rank may hold during backward: its share, one bucket and the largest parameter's
    gradient (fp32), and MEMORY_SLACK_BYTES."""
    share = sum(end - start for _, start, end in flat_partition(numels, world_size)[rank])
    return 4 * (share + bucket_elements + max(numels)) + MEMORY_SLACK_BYTES


def _traffic(results, numels):
    psi = sum(numels)
    for rank, result in enumerate(results):
        for step, rows in enumerate(result["traffic"]):
            if volume(rows, "all-reduce") >= psi / 2:
                return (f"traffic: in step {step} rank {rank} all-reduces the gradients during backward "
                        f"({volume(rows) / psi:.2f} Ψ in the ZeRO paper's count): every rank receives every averaged "
                        "gradient, twice what ZeRO-2 needs, and then keeps only its share")
            if volume(rows) > TRAFFIC_LIMIT * psi:
                return (f"traffic: in step {step} rank {rank} moves {volume(rows) / psi:.2f} Ψ during backward (the "
                        f"ZeRO paper's count); ZeRO-2's gradient reduction stays under {TRAFFIC_LIMIT:g} Ψ")
            if volume(rows) == 0:
                return (f"traffic: in step {step} rank {rank} calls no torch.distributed collective during backward: "
                        "the gradients are not reduced from the hooks")
    return None


def _training(results, hyper, steps):
    if any("params" not in r for r in results):
        return "the ranks stopped before training"  # _shards names why; kept for safety
    found = verdict._drift_problem([r["params"] for r in results], steps)
    if found:
        return found
    gap = verdict._max_gap(results[0]["params"], deep.reference(hyper, steps))
    if gap > verdict.ATOL:
        return (f"wrong training: with your gradient shards the parameters differ from torch.optim.AdamW on the full "
                f"batch by up to {gap:.2e} after {steps} steps (tolerance {verdict.ATOL:g})")
    return None
