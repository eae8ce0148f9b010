"""Judge a ZeRO-3 run (zerolab.handmade.zero3.rank) and name the mistake in one sentence.

Four things are graded, each from what the grader measured, never from what the learner's code reports:
- numbers: the whole parameters after K steps equal one-process torch.optim.AdamW on the full batch, and again
  with two backward() calls before each step (gradient accumulation: a shard's .grad adds them up);
- memory: the parameter bytes alive in a rank at any sampled moment stay within its shards of every parameter
  plus two layers gathered (the one computing and the one prefetched), plus the gradients of every activation
  (autograd's, alive in backward for as long as the garbage collector, paused while sampling, leaves them);
  gradients, optimizer state, batch and activations are left out (zero3_probe);
- traffic: no all-reduce of gradients, and at most two all-gathers of the parameters and one reduce-scatter of
  the gradients per step (3Ψ, padded per parameter as DeepSpeed's partition_parameters.py pads);
- no recomputation: one Linear forward per layer per step;
- and first, that every async all-gather was waited for (zero3_probe delivers its result only at wait()).
"""
from zerolab.handmade.zero1.verdict import _max_gap
from zerolab.handmade.zero3 import model as deep

ATOL = 1e-5  # six layers of fp32 reduced in another order move a parameter by a few 1e-6
TRAFFIC_SLACK = 0.02  # fraction of 3Ψ allowed above it (none is needed: the counts are exact)


def layout(world_size):
    """Sizes the limits are made of, from the model and DeepSpeed's per-parameter padding."""
    model = deep.build()
    numels = [p.numel() for p in model.parameters()]
    padded = [deep.padded_numel(n, world_size) for n in numels]
    layer_elements = [sum(deep.padded_numel(p.numel(), world_size) for p in layer.parameters(recurse=False))
                      for layer in deep.layers(model)]
    rows = deep.GLOBAL_BATCH // world_size
    return {"psi": sum(numels), "psi_padded": sum(padded), "shard_bytes": 4 * sum(padded) // world_size,
            "layer_bytes": 4 * max(layer_elements), "layers": len(layer_elements), "all_bytes": 4 * sum(numels),
            "slack_bytes": 4 * rows * sum(deep.WIDTHS) + 1024}  # every activation's gradient alive at once


def memory_limit(world_size):
    sizes = layout(world_size)
    return sizes["shard_bytes"] + 2 * sizes["layer_bytes"] + sizes["slack_bytes"]


def zero3_problem(results, hyper, steps):
    """What the learner's ZeRO-3 did wrong on these ranks, or None."""
    world_size = len(results)
    sizes = layout(world_size)
    for result in results:
        if result.get("problem"):
            return _shard_message(result["problem"], world_size)
    for rank, result in enumerate(results):
        for index, step in enumerate(result["steps"]):
            if step.get("never_waited"):
                return (f"async without wait(): in step {index} rank {rank} started {step['never_waited']} "
                        "all-gather(s) with async_op=True and never called wait() on the work returned; the "
                        "gathered tensor holds the result only after wait(), so reading it before is a race")
    for rank, result in enumerate(results):
        for step in result["steps"]:
            if step["matmuls"] > sizes["layers"]:
                return (f"recomputation: one step ran {step['matmuls']} Linear forwards for {sizes['layers']} "
                        "layers: some layer's forward runs again in backward; ZeRO-3 keeps the activations and "
                        "gathers only the weights again")
    for rank, result in enumerate(results):
        for step in result["steps"]:
            reduced = step["collectives"].get("all-reduce", {}).get("elements", 0)
            if reduced > sizes["psi"] // 4:
                return (f"traffic: rank {rank} all-reduces {reduced} elements per step: the full gradients are "
                        "all-reduced, so every rank receives all of them; a reduce-scatter gives each rank only "
                        "its shard")
    limit = memory_limit(world_size)
    for rank, result in enumerate(results):
        for step_index, step in [(None, result["construction"])] + list(enumerate(result["steps"])):
            peak = step["peak_param_bytes"]
            if peak is None or peak - result["baseline_bytes"] <= limit:
                continue
            held = peak - result["baseline_bytes"]
            if step_index is None:
                return (f"memory: once Zero3 was built, rank {rank} held {held} bytes of parameters; its shards are "
                        f"{sizes['shard_bytes']} bytes and the whole model {sizes['all_bytes']}: the whole "
                        "parameters are not freed after sharding")
            return (f"memory: in step {step_index} rank {rank} held {held} bytes of parameters at once; its shards "
                    f"are {sizes['shard_bytes']} bytes and the whole model {sizes['all_bytes']}: gathered parameters "
                    "are not freed after use")
    for rank, result in enumerate(results):
        if result["full_grads_kept"]:
            return (f"memory: after backward, parameter {result['full_grads_kept'][0]} of the model still holds its "
                    f"full .grad on rank {rank}: free a full gradient once it is reduce-scattered")
    got = results[0]["params"]
    gap = _max_gap(got, deep.reference(hyper, steps))
    if gap > ATOL:
        if _max_gap(got, deep.reference(hyper, steps, grad_scale=world_size)) <= ATOL:
            return f"the gradients are summed over the {world_size} ranks, not averaged"
        return (f"after {steps} steps on {world_size} ranks the parameters differ from torch.optim.AdamW on the full "
                f"batch by up to {gap:.2e} (tolerance {ATOL:g}): check what each rank's shard and its gradient hold")
    budget = 3 * sizes["psi_padded"] * (1 + TRAFFIC_SLACK)
    for rank, result in enumerate(results):
        for step in result["steps"]:
            moved = sum(entry["elements"] for entry in step["collectives"].values())
            if moved > budget:
                return (f"traffic: rank {rank} moves {moved / sizes['psi']:.2f} Ψ per step through collectives: more "
                        "than gathering the parameters twice and reduce-scattering the gradients once")
    return None


def accumulation_problem(results, hyper, steps):
    """The run with two backward() calls before each step (zero3_grade.ACCUMULATION), after a run with one that
    trained right: what differs is the accumulation, so a mismatch is named as such."""
    world_size = len(results)
    for result in results:
        if result.get("problem"):
            return _shard_message(result["problem"], world_size)
    gap = _max_gap(results[0]["params"], deep.reference(hyper, steps))
    if gap > ATOL:
        return (f"gradient accumulation: with two backward() calls before each step the parameters differ from "
                f"torch.optim.AdamW on the full batch by up to {gap:.2e} (tolerance {ATOL:g}); a shard's .grad adds "
                "each backward's averaged gradient to what it holds, as torch does with .grad, until zero_grad()")
    return None


def _shard_message(problem, world_size):
    kind = problem["kind"]
    if kind == "not_a_list":
        return (f"wrong type: shards() returned a {problem['type']}; it should return a list of tensors, one per "
                "parameter")
    if kind == "count":
        return (f"wrong count: shards() returned {problem['got']} tensors for a model with {problem['want']} "
                "parameters; it should return one shard per parameter")
    if kind == "not_a_leaf":
        return (f"wrong type: shard {problem['index']} is a {problem['type']} but not a 1-D leaf tensor that "
                "requires grad: the optimizer steps the shards")
    if kind == "size":
        return (f"wrong size: rank {problem['rank']}'s shard of parameter {problem['index']} has {problem['got']} "
                f"elements: each parameter is padded on its own to a multiple of the {world_size} ranks and split "
                "into equal shards")
    if kind == "owners":
        return (f"wrong owners: rank {problem['rank']}'s shard of parameter {problem['index']} is not that rank's "
                "slice of the padded parameter: every rank must use the same layout, rank r keeping the r-th "
                "equal piece")
    if kind == "missing":
        return f"missing class: your cell defines no {problem['name']}"
    if kind == "no_grad":
        return (f"missing gradient: after backward, rank {problem['rank']}'s shard {problem['index']} has no .grad "
                "of its own shape: each rank's averaged gradient shard belongs in its shard's .grad")
    return f"the ranks reported {kind}"
