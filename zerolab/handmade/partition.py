"""Who owns what: DeepSpeed's partition of a flat parameter buffer into equal shares, the last one padded.

DeepSpeed (stage_1_and_2.py) flattens a parameter group into one buffer, pads it to a multiple of the world
size and gives rank r the elements [r*s, (r+1)*s) with s = padded length / N. A share can start or end inside a
parameter, so a rank owns ranges (param_index, start, end) of each parameter's flattened elements.
"""


def share_size(total, world_size):
    """Elements per rank: the flat length padded up to a multiple of the world size, divided by it."""
    return -(-total // world_size)


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
