"""DeepSpeed's newer features on 2 CPU ranks (lesson 10, section 6): what DeepSpeed 0.19.8 runs there, and the exact
refusal of what it does not.

``compare()`` launches each case on 2 CPU ranks (zerolab.run.launch: forked from the warm server, and an identical
job comes from $ZEROLAB_RUN_CACHE when it is set). One launch per case, so that no case inherits another's process
groups (DeepSpeed keeps its tensor- and sequence-parallel groups in module globals, deepspeed.utils.groups). Each
rank (``python -m zerolab.run.features JOB.json``) runs one of:

- "zenflow": a small MLP under ZeRO-2 with CPU optimizer offload (DeepSpeed's CPU Adam, the prebuilt cpu_adam op),
  trained for STEPS steps plainly (ZeRO-Offload) and with a ``zero_optimization.zenflow`` block (overlap_step false),
  from the same seed, on the same batch at every step. Per step: whether DeepSpeed's CPU Adam stepped (the step
  count in its state), the columns of the first weight that ZenFlow selected (``selected_indices``, which
  ``ZenFlowZeroOptimizerSequential`` sets on the parameter) and the columns of that weight that changed in the step;
  and whether ``deepspeed.initialize`` kept the weights (with ZenFlow, 0.19.8 leaves each 2-D weight holding its
  transpose's values: ZenFlow flattens 2-D tensors column by column, and the ZeRO-2 optimizer views the flat buffer
  in each parameter's shape).
- "autotp": a tiny Llama built from a transformers config (no download), ``"tensor_parallel": {"autotp_size": 2}``
  with ZeRO-1: each projection's local weight shape next to its full one, and the loss next to the same model's
  without tensor parallelism.
- "ulysses": the same Llama with DeepSpeed's Ulysses sequence parallelism (UlyssesSPAttentionHF over sdpa), each
  rank given half of the sequence: its local length and the loss it reconstructs, next to the unsharded loss.
- "refusals": ``deepspeed.compile.util.is_deepcompile_supported()``, and the error ``deepspeed.initialize`` raises
  for SuperOffload (ZeRO-3, ``offload_optimizer.super_offload``).
"""
from zerolab.run.worker import emit, serve, start_cpu_rank

RANKS = 2
STEPS = 4
CASES = ("zenflow", "autotp", "ulysses", "refusals")
ZENFLOW_MODES = ("ZeRO-Offload", "ZenFlow")
ZENFLOW = {"topk_ratio": 0.1, "update_interval": 2, "select_strategy": "step", "select_interval": 2,
           "overlap_step": False}
MLP = {"width": 64, "hidden": 256}
LR = 1e-2
# A small Llama: every projection is a Linear whose output or input AutoTP can split in 2, and 4 heads for Ulysses
LLAMA = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 4, "max_position_embeddings": 256}
SEQUENCE = 16
PROJECTIONS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj")


def job(case):
    return {"case": case, "device": "cpu", "steps": STEPS, "mlp": MLP, "llama": LLAMA, "sequence": SEQUENCE,
            "zenflow": ZENFLOW}


def compare(cases=CASES, progress=True):
    """{case: [per rank] its findings} of real runs on 2 CPU ranks, one launch a case."""
    from zerolab.run.launch import launch

    return {case: launch(job(case), RANKS, timeout=300, progress=progress, worker="zerolab.run.features")
            for case in cases}


def zenflow_table(results, rank=0):
    """The loss of each step, plain ZeRO-Offload next to ZenFlow, and what ZenFlow's step updated where."""
    from zerolab.base.i18n import tr
    from zerolab.run.report import aligned

    found = results["zenflow"][rank]
    zenflow = found["ZenFlow"]
    rows = [[tr("step"), tr("loss, ZeRO-Offload"), tr("loss, ZenFlow"), tr("CPU Adam stepped"),
             tr("columns ZenFlow selected"), tr("columns that changed")]]
    for step in range(len(zenflow["losses"])):
        selected = zenflow["selected"][step]
        rows.append([str(step + 1), f"{found['ZeRO-Offload']['losses'][step]:.6f}", f"{zenflow['losses'][step]:.6f}",
                     tr("yes") if zenflow["cpu_stepped"][step] else tr("no"),
                     f"{len(selected)} / {zenflow['columns']}" if selected is not None else "-",
                     f"{len(zenflow['changed'][step])} / {zenflow['columns']}"])
    return aligned(rows)


def autotp_table(results, rank=0):
    """Each projection of layer 0: the weight shape this rank holds next to the model's full one."""
    from zerolab.base.i18n import tr
    from zerolab.run.report import aligned

    found = results["autotp"][rank]
    rows = [[tr("projection"), tr("full weight"), tr("this rank's weight")]]
    for name in PROJECTIONS:
        shapes = found["shapes"][name]
        rows.append([name, " x ".join(map(str, shapes["full"])), " x ".join(map(str, shapes["local"]))])
    return aligned(rows)


def main(job_path):
    serve(job_path, run_job)


def run_job(job, rank):
    emit(event="phase", rank=rank, phase=job["case"])
    return {"zenflow": _zenflow, "autotp": _autotp, "ulysses": _ulysses, "refusals": _refusals}[job["case"]](job, rank)


def _mlp(job):
    import torch

    torch.manual_seed(0)
    width, hidden = job["mlp"]["width"], job["mlp"]["hidden"]
    return torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, width))


def _mlp_batch(job, rank):
    """The one batch a rank trains on at every step: a loss that falls says the steps learn."""
    import torch

    generator = torch.Generator().manual_seed(1000 + rank)
    width = job["mlp"]["width"]
    return torch.randn(4, width, generator=generator), torch.randn(4, width, generator=generator)


def _offload_config(zenflow=None):
    zero = {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": False}}
    if zenflow is not None:
        zero["zenflow"] = dict(zenflow)
    # no torch_adam: with optimizer offload DeepSpeed steps its own CPU Adam, which ZenFlow needs (ZenFlowCPUAdam)
    return {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1,
            "optimizer": {"type": "AdamW", "params": {"lr": LR}}, "zero_optimization": zero,
            "steps_per_print": 10**9}


def _zenflow(job, rank):
    import torch

    from zerolab.run.worker import prepare_ops

    deepspeed = start_cpu_rank()
    found = {}
    for mode in ZENFLOW_MODES:
        emit(event="phase", rank=rank, phase=mode)
        config = _offload_config(job["zenflow"] if mode == "ZenFlow" else None)
        prepare_ops(config)
        model = _mlp(job)
        x, y = _mlp_batch(job, rank)
        built = [p.detach().clone() for p in model.parameters()]
        engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
        initialized = [p.detach().clone() for p in model.parameters()]
        weight = model[0].weight  # (hidden, width): ZenFlow selects among its `width` columns
        cpu_adam = engine.optimizer.optimizer
        losses, cpu_stepped, selected, changed = [], [], [], []
        for step in range(job["steps"]):
            before, cpu_steps = weight.detach().clone(), _adam_steps(cpu_adam)
            loss = torch.nn.functional.mse_loss(engine(x), y)
            losses.append(float(loss))
            engine.backward(loss)
            engine.step()
            cpu_stepped.append(_adam_steps(cpu_adam) > cpu_steps)
            indices = getattr(weight, "selected_indices", None)
            selected.append(None if indices is None else sorted(int(i) for i in indices))
            changed.append([int(i) for i in torch.nonzero((weight.detach() != before).any(dim=0)).flatten()])
        found[mode] = {"weights_kept": all(torch.equal(a, b) for a, b in zip(built, initialized)),
                       "weights_transposed_in_place": all(torch.equal(a, _transposed_in_place(b))
                                                          for a, b in zip(initialized, built)),
                       "losses": losses, "cpu_stepped": cpu_stepped, "selected": selected, "changed": changed,
                       "columns": int(weight.shape[1]), "optimizer": type(engine.optimizer).__name__,
                       "cpu_optimizer": type(cpu_adam).__name__,
                       "gradient_accumulation_steps": engine.gradient_accumulation_steps()}
        del engine
    return found


def _transposed_in_place(tensor):
    """A 2-D tensor's transpose, its values read back in the tensor's own shape (a 1-D tensor as it is)."""
    return tensor.t().contiguous().view(tensor.shape) if tensor.dim() == 2 else tensor


def _adam_steps(optimizer):
    """How many steps DeepSpeed's CPU Adam has taken: the largest step count in its state (0 before the first)."""
    return max((int(state.get("step", 0)) for state in optimizer.state.values()), default=0)


def _llama(job):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**job["llama"])
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def _tokens(job, batch):
    import torch

    return torch.randint(0, job["llama"]["vocab_size"], (batch, job["sequence"]),
                         generator=torch.Generator().manual_seed(3))


def _autotp(job, rank):
    import torch

    deepspeed = start_cpu_rank()
    tokens = _tokens(job, 2)
    reference = _llama(job)
    with torch.no_grad():
        reference_loss = float(reference(input_ids=tokens, labels=tokens).loss)
    full = {name: list(reference.model.layers[0].get_submodule(name).weight.shape) for name in PROJECTIONS}
    # no train_batch_size: DeepSpeed 0.19.8 checks it against all ranks, not the data-parallel ones (1 here)
    config = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": 1}, "tensor_parallel": {"autotp_size": 2}, "steps_per_print": 10**9}
    engine, _, _, _ = deepspeed.initialize(model=_llama(job), model_parameters=None, config=config)
    layer = engine.module.model.layers[0]
    shapes = {name: {"full": full[name], "local": list(layer.get_submodule(name).weight.shape),
                     "class": type(layer.get_submodule(name)).__name__} for name in PROJECTIONS}
    losses = []
    for _ in range(2):
        loss = engine(input_ids=tokens, labels=tokens).loss
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
    return {"reference_loss": reference_loss, "losses": losses, "shapes": shapes,
            "data_parallel_ranks": engine.dp_world_size, "train_batch_size": engine.train_batch_size()}


def _ulysses(job, rank):
    import torch
    import torch.nn.functional as F

    deepspeed = start_cpu_rank()
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF
    from deepspeed.utils import groups

    tokens = _tokens(job, 1)
    positions = torch.arange(job["sequence"]).unsqueeze(0)
    reference = _llama(job)
    with torch.no_grad():
        reference_loss = float(reference(input_ids=tokens, position_ids=positions, labels=tokens).loss)
    model = _llama(job)
    mpu = UlyssesSPAttentionHF.register_with_transformers(
        model_name_or_path=model, core_attn_implementation="sdpa", sequence_parallel_size=RANKS, micro_batch_size=1,
        seq_length_is_variable=True)
    config = {"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1, "sequence_parallel_size": RANKS,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "zero_optimization": {"stage": 3}, "steps_per_print": 10**9}
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=None, config=config, mpu=mpu)
    sp_rank, sp_ranks = groups._get_sequence_parallel_rank(), groups._get_sequence_parallel_world_size()
    group = groups._get_sequence_parallel_group()
    # shard as DeepSpeed's UlyssesSPDataLoaderAdapter does: labels shifted before, each rank a contiguous chunk
    shifted = torch.cat([tokens[:, 1:], torch.full((1, 1), -100)], dim=1)
    chunk = job["sequence"] // sp_ranks
    mine = slice(sp_rank * chunk, (sp_rank + 1) * chunk)
    logits = engine(input_ids=tokens[:, mine], position_ids=positions[:, mine]).logits
    loss_sum = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), shifted[:, mine].reshape(-1),
                               ignore_index=-100, reduction="sum")
    counted = (shifted[:, mine] != -100).sum()
    sums = torch.distributed.nn.functional.all_gather(loss_sum, group=group)
    counts = [torch.zeros_like(counted) for _ in range(sp_ranks)]
    torch.distributed.all_gather(counts, counted, group=group)
    loss = sum(sums) / sum(counts)
    engine.backward(loss)
    engine.step()
    return {"reference_loss": reference_loss, "loss": float(loss), "sequence": job["sequence"],
            "local_sequence": int(logits.shape[1]), "sequence_parallel_ranks": sp_ranks,
            "local_positions": [int(p) for p in positions[0, mine]]}


def _refusals(job, rank):
    deepspeed = start_cpu_rank()
    from deepspeed.compile.util import is_deepcompile_supported

    found = {"deepcompile_supported": bool(is_deepcompile_supported())}
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
              "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "super_offload": True}},
              "steps_per_print": 10**9}
    try:
        deepspeed.initialize(model=_mlp(job), model_parameters=None, config=config)
        found["superoffload"] = None
    except Exception as error:  # the refusal is what is measured
        found["superoffload"] = {"type": type(error).__name__, "message": str(error)}
    return found


if __name__ == "__main__":
    import sys

    main(sys.argv[1])
