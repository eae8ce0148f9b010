"""Judge what the ranks did against the one-process reference, and name the mistake in one sentence.

Every check raises AssertionError with a message that says what is wrong, not how to write the fix. The
reference is torch.optim.AdamW on the full batch in one fp32 process (zerolab.handmade.core.model.reference).
"""
import math

from zerolab.handmade.core import model as fixed
from zerolab.handmade.core.live import COMMUNICATION, OTHER
from zerolab.handmade.core.partition import flat_partition, group_partition, share_size

# fp32, a handful of steps: all-reducing the ranks' gradients sums in a different order than one process
# does, which moves a parameter by a few ulps; a real mistake moves it by orders of magnitude more.
ATOL = 2e-6
SAME_ACROSS_RANKS = 1e-7
STATE_SLACK_BYTES = 256  # step counters and the padded last share
COUPLED_ATOL = 1e-6  # one step of torch.optim.Adam's L2 decay against the rank's: the same arithmetic
GRAD_SLACK_BYTES = 64


def partition_problem(answer, numels, world_size):
    """What is wrong with ``answer`` as the partition of ``numels`` over ``world_size`` ranks, or None."""
    call = f"partition({numels}, {world_size})"
    if answer is None:
        return f"{call} returned None: nothing is returned (a missing return statement?); return one list per rank"
    if not isinstance(answer, (list, tuple)) or len(answer) != world_size:
        return f"{call} should return one list of ranges per rank ({world_size} lists)"
    owner = [[None] * n for n in numels]
    flat_start = [sum(numels[:i]) for i in range(len(numels))]
    size, total = share_size(sum(numels), world_size), sum(numels)
    previous_end, counts = 0, []
    for rank, ranges in enumerate(answer):
        if not isinstance(ranges, (list, tuple)):
            return f"{call}[{rank}] should be a list of (param_index, start, end)"
        owned = 0
        for item in ranges:
            if not (isinstance(item, (list, tuple)) and len(item) == 3 and all(type(v) is int for v in item)):
                return f"{call}[{rank}] holds {item!r}; each range is a tuple of three ints (param_index, start, end)"
            index, start, end = item
            if not (0 <= index < len(numels) and 0 <= start < end <= numels[index]):
                return f"{call}[{rank}] holds {item!r}, which is empty or outside parameter {index}'s elements"
            for element in range(start, end):
                if owner[index][element] is not None:
                    return f"{call}: element {element} of parameter {index} is owned by rank {owner[index][element]} " \
                           f"and rank {rank}"
                owner[index][element] = rank
            if flat_start[index] + start != previous_end:
                return f"{call}: rank {rank}'s ranges are not the next contiguous piece of the flattened parameters"
            previous_end = flat_start[index] + end
            owned += end - start
        counts.append(owned)
    for index, elements in enumerate(owner):
        if None in elements:
            return f"{call}: element {elements.index(None)} of parameter {index} is owned by no rank"
    if counts != _share_counts(total, world_size, size):
        if counts == _share_counts(total, world_size, -(-total // world_size)):
            return (f"{call}: the flat buffer is padded to a multiple of N = {world_size}; DeepSpeed's ZeRO-1/2 "
                    "pad it to a multiple of 2N, so the shares are not the ones DeepSpeed builds")
        rank = next(r for r, (got, want) in enumerate(zip(counts, _share_counts(total, world_size, size)))
                    if got != want)
        return (f"{call}: rank {rank} owns {counts[rank]} elements; the shares are not DeepSpeed's equal pieces of "
                "the buffer padded to a multiple of 2N (the padding is at the end: only the last shares are short "
                "or empty)")
    return None


def _share_counts(total, world_size, size):
    return [min(size, max(0, total - rank * size)) for rank in range(world_size)]


def zero1_problem(results, hyper, steps, groups=None):
    """What the learner's ShardedAdamW did wrong on these ranks, or None. ``groups``: the layout of the parameter
    groups it was given (zerolab.handmade.core.model.param_groups)."""
    world_size = len(results)
    problem = (ownership_problem([r["owned"] for r in results], fixed.group_numels(fixed.build(), groups), groups)
               or group_partition_problem([r["owned"] for r in results], groups))
    if problem:
        return problem
    problem = _memory_problem(results)
    if problem:
        return problem
    if _coupled_decay(results):
        return ("with zero gradients one step moves the parameters the way Adam's coupled L2 decay does "
                "(weight_decay * p added to the gradient, then scaled by Adam's moments); AdamW's decay is "
                "decoupled: the parameter itself is shrunk, outside the moments")
    more, less = _decay_errors(results)
    if more:  # before the drift check: decaying what a rank does not own also makes the ranks drift apart
        return ("with zero gradients one step shrinks some parameters by more than AdamW's weight decay: decay is "
                "applied to elements more than once (by ranks that do not own them?)")
    problem = _drift_problem([r["params"] for r in results], steps)
    if problem:
        return problem
    got, want = results[0]["params"], fixed.reference(hyper, steps, groups=groups)
    if _max_gap(got, want) <= ATOL:
        return _grad_shard_problem(results, hyper, groups) or _all_gather_problem(results, groups)
    if groups is not None and _max_gap(got, fixed.reference(hyper, steps)) <= ATOL:
        return ("the optimizer was given two parameter groups (weights with weight decay, biases without) and "
                "trained every parameter with the first group's hyper-parameters: each group's lr, betas, eps "
                "and weight_decay apply to its own parameters (read every entry of self.param_groups)")
    if less:
        return "with zero gradients one step leaves some parameters without AdamW's weight decay"
    if _max_gap(got, fixed.reference(hyper, steps, grad_scale=world_size, groups=groups)) <= ATOL:
        return f"the gradients are summed over the {world_size} ranks, not averaged"
    return (f"after {steps} steps on {world_size} ranks the parameters differ from torch.optim.AdamW on the full "
            f"batch by up to {_max_gap(got, want):.2e} (tolerance {ATOL:g}): check the AdamW update of the "
            "elements a rank owns (moments, bias correction, decoupled weight decay)")


def _all_gather_problem(results, groups):
    """ZeRO-1 shares the updated parameters by all-gathering each rank's share of each group: N shares of the
    group's padded flat length, sized by the longest share, and not more."""
    world_size = len(results)
    most = sum(world_size * share_size(sum(numels), world_size)
               for numels in fixed.numels_per_group(fixed.build(), groups))
    for rank, result in enumerate(results):
        gathered = result.get("all_gathered")
        if gathered is not None and gathered > most:
            return (f"traffic: in step 1 rank {rank}'s all-gathers produce {gathered} elements; sharing the updated "
                    f"parameters takes {world_size} shares per parameter group, {most} elements: each rank sends "
                    "a buffer the size of the longest share, not more")
    return None


def memory_budget(world_size):
    """What a rank of a ZeRO-1 may keep alive besides its parameters and gradients, in bytes, per line of
    zerolab.handmade.core.live: "other" (its optimizer state: Adam's two moments of its share, step counters,
    padding) and "communication buffers" (storages passed to a collective and kept: up to two copies of the
    padded flat parameters, e.g. a flat gradient buffer and an all-gather buffer, and one share)."""
    numels = fixed.numels(fixed.build())
    share = share_size(sum(numels), world_size)
    return {OTHER: fixed.adam_state_bytes() / world_size + STATE_SLACK_BYTES,
            COMMUNICATION: 4 * (2 * share * world_size + share) + STATE_SLACK_BYTES}


def _memory_problem(results):
    world_size = len(results)
    budget, unsharded = memory_budget(world_size), fixed.adam_state_bytes()
    for rank, result in enumerate(results):
        memory = result["memory"]
        held = memory[OTHER]
        if held > budget[OTHER] and held >= unsharded:
            return (f"with {world_size} ranks, rank {rank} keeps {held} bytes alive besides its parameters, "
                    f"gradients and communication buffers, as much as AdamW's {unsharded} bytes of state for the "
                    "whole model: Adam's moments are not sharded (every tensor alive in the rank is counted, "
                    "wherever it is kept)")
        if held > budget[OTHER]:
            return (f"with {world_size} ranks, rank {rank} keeps {held} bytes alive besides its parameters, "
                    f"gradients and communication buffers, more than 1/{world_size} of AdamW's {unsharded} bytes "
                    "of state for the whole model: Adam's moments are not sharded (every tensor alive in the rank "
                    "is counted, wherever it is kept)")
        if memory[COMMUNICATION] > budget[COMMUNICATION]:
            return (f"rank {rank} keeps {memory[COMMUNICATION]} bytes of buffers that went through collectives "
                    "alive after step(), more than two copies of the flat parameters and one share: keep at most "
                    "one flat buffer per purpose, or let them go after the step")
    return None


def _coupled_decay(results):
    """Whether the zero-gradient step did what torch.optim.Adam's (coupled, L2) weight decay does."""
    import torch

    decay = results[0]["decay"]
    if decay["hyper"]["weight_decay"] == 0:
        return False
    coupled = fixed.zero_gradient_step(decay["hyper"], torch.optim.Adam)
    decoupled = fixed.zero_gradient_step(decay["hyper"], torch.optim.AdamW)
    return (all(_max_gap(r["decay"]["after"], coupled) <= COUPLED_ATOL for r in results)
            and _max_gap(coupled, decoupled) > 100 * COUPLED_ATOL)


def ownership_problem(owned_per_rank, numels, groups=None):
    if any(owned is None for owned in owned_per_rank):
        rank = next(r for r, owned in enumerate(owned_per_rank) if owned is None)
        return (f"rank {rank}'s ShardedAdamW has no `owned` list of (param_index, start, end): the tests read which "
                "elements each rank updates from it")
    owners = [[[] for _ in range(n)] for n in numels]
    for rank, owned in enumerate(owned_per_rank):
        for index, start, end in owned:
            if not (0 <= index < len(numels) and 0 <= start < end <= numels[index]):
                return f"rank {rank} claims range {(index, start, end)}, which is not inside parameter {index}"
            for element in range(start, end):
                owners[index][element].append(rank)
    if groups is not None:
        first = len(fixed.param_groups(fixed.build(), groups)[0]["params"])
        if all(not ranks for per_element in owners[first:] for ranks in per_element):
            return ("the optimizer was given two parameter groups and no rank owns any element of the second: "
                    "only self.param_groups[0] is partitioned (every group's parameters must be sharded and "
                    "updated)")
    for index, per_element in enumerate(owners):
        for element, ranks in enumerate(per_element):
            twice = next((rank for rank in ranks if ranks.count(rank) > 1), None)
            if twice is not None:
                return (f"rank {twice} lists element {element} of parameter {index} more than once in `owned`: "
                        "param_index counts the parameters of all groups in order (it does not start again at 0 "
                        "in each group)")
            if len(ranks) != 1:
                who = f"ranks {ranks}" if ranks else "no rank"
                return (f"the ranks disagree on who owns what: element {element} of parameter {index} is owned by "
                        f"{who}; every rank must compute the same owners")
    return None


def group_partition_problem(owned_per_rank, groups):
    """Ranges that cover every element once but are not each group partitioned on its own (flatten, pad to a
    multiple of 2N, share out), as the text asks and DeepSpeed does. Compared as sets of elements per rank."""
    numels_per_group = fixed.numels_per_group(fixed.build(), groups)
    expected = group_partition(numels_per_group, len(owned_per_rank))
    if all(_elements(owned) == _elements(want) for owned, want in zip(owned_per_rank, expected)):
        return None
    together = flat_partition([n for numels in numels_per_group for n in numels], len(owned_per_rank))
    if len(numels_per_group) > 1 and all(_elements(o) == _elements(t) for o, t in zip(owned_per_rank, together)):
        return ("the parameter groups are partitioned together, as one flat list: partition each group on its own "
                "(flatten it, pad it, share it out), as DeepSpeed does, so that every group's elements are spread "
                "over all the ranks")
    rank = next(r for r, (owned, want) in enumerate(zip(owned_per_rank, expected)) if _elements(owned) != _elements(want))
    return (f"rank {rank} owns other elements than partition gives it: the ranges in `owned` come from partition, "
            "applied to each group's parameter sizes on its own (flattened, padded to a multiple of 2N, shared "
            "out in order)")


def _elements(owned):
    return {(index, element) for index, start, end in owned for element in range(start, end)}


def _grad_shard_problem(results, hyper, groups):
    """Exercise 3 hands each rank its averaged gradient as .grad_shard, .grad None: training must not change."""
    steps = fixed.GRAD_SHARD_STEPS
    gap = _max_gap(results[0]["grad_shard"]["params"], fixed.reference(hyper, steps, groups=groups))
    if gap > ATOL:
        return (f"with each .grad None and the averaged gradient of a rank's elements in .grad_shard (how exercise 3 "
                f"hands gradients over), {steps} steps differ from AdamW by up to {gap:.2e} (tolerance "
                f"{ATOL:g}): when a parameter has no .grad, step() must use its .grad_shard")
    return None


def _drift_problem(params_per_rank, steps):
    for rank, params in enumerate(params_per_rank[1:], start=1):
        gap = _max_gap(params, params_per_rank[0])
        if gap > SAME_ACROSS_RANKS:
            return (f"after {steps} steps rank {rank}'s parameters differ from rank 0's by up to {gap:.2e}: the "
                    "updated parameters do not reach every rank")
    return None


def _decay_errors(results):
    """(some element shrank more than one decay, some less) in the zero-gradient step, on any rank."""
    more = less = False
    for result in results:
        decay = result["decay"]
        factor = 1 - decay["hyper"]["lr"] * decay["hyper"]["weight_decay"]
        for before, after in zip(decay["before"], decay["after"]):
            if abs(before) < 1e-3:
                continue
            ratio = after / before
            more = more or ratio < factor - 1e-4
            less = less or ratio > factor + 1e-4
    return more, less


def _max_gap(a, b):
    """The largest difference; inf when the lengths differ or a value is NaN (which no comparison would catch)."""
    if len(a) != len(b):
        return math.inf
    gaps = [abs(x - y) for x, y in zip(a, b)]
    return math.inf if any(math.isnan(gap) for gap in gaps) else max(gaps, default=0.0)


DEEPSPEED_ATOL = 1e-5  # DeepSpeed averages gradients in its own order and steps an fp32 master copy


def _deepspeed_clipping_default():
    """(gradient_clipping when a config leaves it out, DeepSpeed's version), from the installed DeepSpeed."""
    import deepspeed
    from deepspeed.runtime.constants import GRADIENT_CLIPPING_DEFAULT

    return GRADIENT_CLIPPING_DEFAULT, deepspeed.__version__


def stage1_config_problem(config):
    from zerolab.config.checks import unknown_top_level_keys

    if not isinstance(config, dict):
        return "stage1_config(...) should return a dict (a ds_config)"
    for finding in unknown_top_level_keys(config, None):  # a misspelt key trains with DeepSpeed's default instead
        return f"your config has the key {finding.path!r}: {finding.message}"
    zero = config.get("zero_optimization") or {}
    if zero.get("stage") != 1:
        return f"zero_optimization.stage is {zero.get('stage')!r}; this exercise compares with ZeRO-1"
    optimizer = config.get("optimizer") or {}
    if str(optimizer.get("type", "")).lower() not in ("adam", "adamw"):
        return f"optimizer.type is {optimizer.get('type')!r}; the hand-written optimizer is AdamW"
    if not (optimizer.get("params") or {}).get("torch_adam"):
        return ("optimizer.params.torch_adam is not true: DeepSpeed would compile and use its own fused Adam "
                "instead of torch's")
    for key in ("fp16", "bf16"):
        if (config.get(key) or {}).get("enabled"):
            return f"{key} is enabled; the comparison trains in fp32"
    return None


def batch_problem(config, global_batch, world_size):
    """Whether DeepSpeed, resolving the config for ``world_size`` ranks, trains on ``global_batch`` rows per step
    (any split into micro-batches and accumulation steps trains like the full batch), or what is wrong."""
    from zerolab.handmade.zero1.batch import resolve

    try:
        train, micro, accumulation = resolve(config, world_size)
    except (AssertionError, ValueError, TypeError, KeyError) as refusal:
        return f"DeepSpeed refuses the batch settings of your config with {world_size} ranks: {refusal}"
    if train != global_batch:
        return (f"with {world_size} ranks DeepSpeed resolves your config to {train} rows per step (micro-batch "
                f"{micro} x {accumulation} accumulation steps x {world_size} ranks): a step must train on the "
                "global batch, global_batch rows")
    return None


def deepspeed_problem(results, hyper, steps, config=None, loss_scale=1):
    """``loss_scale``: what the ranks multiplied the loss by (model.DEEPSPEED_LOSS_SCALE), the reference too."""
    problem = _drift_problem([r["params"] for r in results], steps)
    if problem:
        return problem
    gap = _max_gap(results[0]["params"], fixed.reference(hyper, steps, step_loss=fixed.scaled_loss(loss_scale)))
    if gap <= DEEPSPEED_ATOL:
        return None
    config = config or {}
    norm = math.sqrt(sum(g * g for g in fixed.full_gradient())) * loss_scale
    if "gradient_clipping" in config and config["gradient_clipping"]:
        return (f"after {steps} steps DeepSpeed's parameters differ from torch.optim.AdamW on the full batch by up "
                f"to {gap:.2e} (tolerance {DEEPSPEED_ATOL:g}): your config sets gradient_clipping="
                f"{config['gradient_clipping']!r}, so before each step DeepSpeed scales the gradients down to that "
                f"global norm when they are larger (the test's first gradient has norm {norm:.1f}); AdamW alone "
                "never clips")
    default, version = _deepspeed_clipping_default()
    if "gradient_clipping" not in config and default:
        return (f"after {steps} steps DeepSpeed's parameters differ from torch.optim.AdamW on the full batch by up "
                f"to {gap:.2e} (tolerance {DEEPSPEED_ATOL:g}): your config leaves gradient_clipping out, and "
                f"DeepSpeed {version} then clips the global gradient norm to {default} before each step (the "
                f"test's first gradient has norm {norm:.1f}); AdamW alone never clips")
    return (f"after {steps} steps DeepSpeed's parameters differ from torch.optim.AdamW on the full batch by up "
            f"to {gap:.2e} (tolerance {DEEPSPEED_ATOL:g}): some hyper-parameter or batch setting differs")
