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

Optimizer offload and bf16 master weights with Muon are not measured here, so not modelled.
"""
import math

from zerolab.engine.deepspeed_traffic import flat_partition

STAGES = (1, 2, 3)
ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2}
MASTER = 4  # fp32 master weight, each half
ADAM_MOMENTS = 8  # Adam's two fp32 moments


SKIPPED_NAMES = ("embed", "lm_head")


def steps_with_muon(name, shape):
    """Whether deepspeed.initialize gives this parameter to Muon (tags it use_muon): a matrix or more, and a name
    that holds neither "embed" nor "lm_head"."""
    return len(shape) >= 2 and not any(word in name.lower() for word in SKIPPED_NAMES)


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
