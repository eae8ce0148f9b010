"""Muon's optimizer state on each rank, as DeepSpeed 0.19.8 keeps it (its MuonWithAuxAdam, optimizer type "Muon").

Muon steps the parameters tagged ``use_muon`` with one momentum buffer each: deepspeed.initialize tags the 2-D ones
whose names contain neither "embed" nor "lm_head". Every other parameter (embeddings, head, norms, biases) goes to
the optimizer's Adam half, with Adam's two moments. Measured on CPU ranks (tests/test_muon_measured.py), DeepSpeed
0.19.8:

- keeps the master weights of both halves in fp32 and Adam's moments in fp32, but the momentum in the gradients'
  dtype: 2 bytes in bf16 training, where Adam's two moments take 8;  # claim: muon-momentum-in-the-gradient-dtype
- at stages 1-2 partitions each half's flat buffer like any parameter group, the Muon half's parameters sorted by
  shape, largest first (MuonWithAuxAdam sorts them); Newton-Schulz needs a whole matrix, so a matrix that straddles
  two ranks' partitions has its whole momentum on both;  # claim: muon-straddling-matrix-momentum-on-both-ranks
- at stage 3 partitions every parameter on its own (ceil(numel / N) elements a rank), its momentum too; stage 3
  refuses Muon unless zero_optimization.reduce_scatter is false.  # claim: muon-at-stage-3-needs-reduce-scatter-off

Each step orthogonalizes every Muon matrix's update with Newton-Schulz: newton_schulz_flops counts it.
Optimizer offload and bf16 master weights with Muon are not measured here, so not modelled.
"""
import bisect
import itertools
import math

from zerolab.engine.deepspeed_traffic import flat_partition

STAGES = (1, 2, 3)
ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2}
MASTER = 4  # fp32 master weight, each half
ADAM_MOMENTS = 8  # Adam's two fp32 moments


SKIPPED_NAMES = ("embed", "lm_head")
NS_STEPS = 5  # muon_update's ns_steps default
RESTART_AT = 2  # zeropower_via_gram_newtonschulz restarts its Gram iteration here


def steps_with_muon(name, shape):
    """Whether deepspeed.initialize gives this parameter to Muon (tags it use_muon): a matrix or more, and a name
    that holds neither "embed" nor "lm_head"."""
    return len(shape) >= 2 and not any(word in name.lower() for word in SKIPPED_NAMES)


def shapes_and_tags(parameter_shapes):
    """([shape], [use_muon]) of a model's ``parameter_shapes()`` ((name, shape) pairs): what the functions here
    take, each parameter tagged as deepspeed.initialize tags it."""
    return [shape for _, shape in parameter_shapes], [steps_with_muon(name, shape) for name, shape in parameter_shapes]


def muon_order(shapes):
    """The order MuonWithAuxAdam keeps its Muon parameters in: by shape, largest first (torch.Size compares as a
    tuple), the model's order among equal shapes."""
    return sorted(shapes, key=tuple, reverse=True)


def rank_bytes(shapes, use_muon, stage, world_size, rank, precision="bf16"):
    """{"master_weights", "momentum", "adam_moments"}: bytes ``rank`` keeps for a model whose parameters have
    ``shapes`` (in the model's order), ``use_muon`` telling which ones Muon steps."""
    _check(stage, precision)
    muon = muon_order([tuple(shape) for shape, tagged in zip(shapes, use_muon) if tagged])
    adam = [tuple(shape) for shape, tagged in zip(shapes, use_muon) if not tagged]
    if stage == 3:
        def share(group):
            return sum(math.ceil(math.prod(shape) / world_size) for shape in group)
        muon_share, adam_share, momentum_elements = share(muon), share(adam), share(muon)
    else:
        muon_share, momentum_elements, _ = _flat(muon, world_size, rank)
        adam_share = _flat(adam, world_size, rank)[0]
    return {"master_weights": MASTER * (muon_share + adam_share),
            "momentum": ELEMENT[precision] * momentum_elements,
            "adam_moments": ADAM_MOMENTS * adam_share}


def most_loaded_rank(shapes, use_muon, stage, world_size, precision="bf16"):
    """(rank, rank_bytes) of the rank that keeps the most optimizer-state bytes: the one a GPU's memory must hold.
    At stage 3 every rank keeps the same; at stages 1-2 the ranks whose partitions cut through matrices keep each of
    them whole. The ranks' overlaps are found from the parameters' offsets (bisect), so a thousand ranks cost no more
    than a few."""
    _check(stage, precision)
    if stage == 3:
        return 0, rank_bytes(shapes, use_muon, stage, world_size, 0, precision)
    muon = [math.prod(shape) for shape in muon_order([tuple(s) for s, tagged in zip(shapes, use_muon) if tagged])]
    adam = [math.prod(shape) for shape, tagged in zip(shapes, use_muon) if not tagged]
    muon_overlaps, adam_overlaps = _overlaps(muon, world_size), _overlaps(adam, world_size)
    element = ELEMENT[precision]

    def total(rank):
        (muon_share, momentum), (adam_share, _) = muon_overlaps[rank], adam_overlaps[rank]
        return MASTER * (muon_share + adam_share) + element * momentum + ADAM_MOMENTS * adam_share
    rank = max(range(world_size), key=total)
    return rank, rank_bytes(shapes, use_muon, stage, world_size, rank, precision)


def newton_schulz_flops(shape, steps=NS_STEPS):
    """Matrix-multiply FLOPs (2 per multiply-add) of one orthogonalization of a gradient of ``shape`` by DeepSpeed
    0.19.8's default, Gram Newton-Schulz (original_muon.zeropower_via_gram_newtonschulz, ns_method "gram"): for an
    n x m matrix with n <= m it iterates on the n x n Gram matrix and restarts at iteration 2; a square one takes the
    standard quintic iteration. Checked against torch's FlopCounterMode on muon_update itself
    (tests/test_fit_muon.py).  # claim: muon-newton-schulz-flops"""
    n, m = sorted(shape[-2:])
    batch = math.prod(shape[:-2])
    if n == m:
        return batch * steps * (4 * n * n * m + 2 * n ** 3)
    flops, have_q = 2 * n * n * m, False  # R = X @ X.mT
    for i in range(steps):
        if i == RESTART_AT:
            flops += 4 * n * n * m  # X = Q @ X, R = X @ X.mT
            have_q = False
        flops += 2 * n ** 3 + (2 * n ** 3 if have_q else 0)  # R @ R; Z @ Q
        have_q = True
        if i < steps - 1 and i + 1 != RESTART_AT:
            flops += 4 * n ** 3  # Z @ R, Z @ RZ
    return batch * (flops + 2 * n * n * m)  # X = Q @ X


def newton_schulz_rank_flops(shapes, use_muon, world_size):
    """Newton-Schulz FLOPs of the busiest rank per optimizer step at ZeRO stages 1-2: each rank orthogonalizes every
    Muon matrix its partition touches, whole (stage_1_and_2.py runs muon_update on each of its partition's
    parameters, a straddling matrix on both ranks)."""
    muon = muon_order([tuple(shape) for shape, tagged in zip(shapes, use_muon) if tagged])
    if not muon:
        return 0
    overlaps = _overlaps([math.prod(shape) for shape in muon], world_size,
                         [newton_schulz_flops(shape) for shape in muon])
    return max(flops for _, flops in overlaps)


def _overlaps(sizes, world_size, weights=None):
    """[(partition size, the ``weights`` (default: the elements) of the whole parameters overlapping the partition)]
    per rank, as _flat gives."""
    if not sizes:
        return [(0, 0)] * world_size
    weights = sizes if weights is None else weights
    size = flat_partition(sizes, world_size, 0)[0]
    starts = list(itertools.accumulate(sizes, initial=0))  # starts[i]: offset of parameter i
    ends_after = list(itertools.accumulate(sizes))
    summed = list(itertools.accumulate(weights, initial=0))
    result = []
    for rank in range(world_size):
        begin, end = rank * size, (rank + 1) * size
        first = bisect.bisect_right(ends_after, begin)  # the first parameter ending after the partition begins
        last = bisect.bisect_left(starts, end, hi=len(sizes))  # parameters starting before it ends: [0, last)
        result.append((size, summed[last] - summed[first] if last > first else 0))
    return result


def per_parameter(precision="bf16"):
    """Bytes of optimizer state per parameter, without partitioning: (Muon's, Adam's), master weight included."""
    _check(1, precision)
    return MASTER + ELEMENT[precision], MASTER + ADAM_MOMENTS


def _flat(group, world_size, rank):
    """(partition size, elements of the whole parameters overlapping ``rank``'s partition) of one group at stages
    1-2; (0, 0) for an empty group (DeepSpeed builds no group for it)."""
    if not group:
        return 0, 0, 0
    return flat_partition([math.prod(shape) for shape in group], world_size, rank)


def _check(stage, precision):
    if stage not in STAGES:
        raise ValueError(f"Muon is modelled at ZeRO stages 1, 2 and 3, got stage {stage!r}")
    if precision not in ELEMENT:
        raise ValueError(f"precision must be one of {', '.join(ELEMENT)}, got {precision!r}")
