"""Who owns what: DeepSpeed ZeRO-1/2's partition of a parameter group's flat buffer into equal shares.

DeepSpeed 0.19.8 (runtime/zero/stage_1_and_2.py) flattens each parameter group into one buffer, pads it to a
multiple of 2N (``nccl_start_alignment_factor = 2`` times the world size N) and gives rank r the elements
[r*s, (r+1)*s) with s = padded length / N. The padding sits at the end of the buffer, so the last share is short;
when the padding is longer than a share (fewer elements than 2N), the last ranks own no element at all. A share
can start or end inside a parameter, so a rank owns ranges (param_index, start, end) of the parameters' elements.
"""

ALIGNMENT_FACTOR = 2  # DeepSpeed's nccl_start_alignment_factor: 4-byte alignment / sizeof(fp16)


def share_size(total, world_size):
    """Elements per rank: the flat length padded up to a multiple of 2N, divided by N."""
    alignment = ALIGNMENT_FACTOR * world_size
    return -(-total // alignment) * alignment // world_size


def flat_partition(numels, world_size):
    """For each rank, the [(param_index, start, end), ...] it owns (end exclusive; padding owns nothing)."""
    total = sum(numels)
    size = share_size(total, world_size)
    shares = []
    for rank in range(world_size):
        low, high = rank * size, min((rank + 1) * size, total)
        ranges, offset = [], 0
        for index, numel in enumerate(numels):
            start, end = max(low, offset), min(high, offset + numel)
            if start < end:
                ranges.append((index, start - offset, end - offset))
            offset += numel
        shares.append(ranges)
    return shares


def group_partition(numels_per_group, world_size):
    """For each rank, its ranges over every parameter group, each group partitioned on its own (flat_partition), as
    DeepSpeed does; param_index counts the parameters of all groups in order."""
    shares, first = [[] for _ in range(world_size)], 0
    for numels in numels_per_group:
        for rank, ranges in enumerate(flat_partition(numels, world_size)):
            shares[rank] += [(first + index, start, end) for index, start, end in ranges]
        first += len(numels)
    return shares
