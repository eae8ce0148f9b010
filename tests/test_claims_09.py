"""Lesson 09's claims about DeepSpeed checkpoints (and those of `zerolab ckpt`, marked in zerolab/ckpt/), checked on
DeepSpeed 0.19.8 and torch 2.13 themselves.

One run on 2 CPU ranks (tests/claim_runs_09.py, fixture `saved`) trains the tiny GPT two steps and saves it with
save_checkpoint (no tag) and save_16bit_model at ZeRO stage 0 (bf16), 1 (fp32), 2 (bf16) and 3 (bf16, every
parameter partitioned), and at stage 3 with DeepSpeed's default persistence threshold and the gather flag; rank 0
then converts the stage-2 save with ds_to_universal and both ranks load it back with load_universal. The tests read
what those saves wrote (the tag folder's name, `latest`, each file's keys, dtypes and sizes, the order of rank 0's
writes), call DeepSpeed's zero_to_fp32 and ds_to_universal on them, and probe DeepSpeed's config defaults and
torch's save, load and Adam. The other claims of lesson 09 are checked in tests/test_ckpt.py (see
autograder/claims/09_checkpoints.toml).
"""
import argparse
import io
import math
import os
import pickle
import pickletools
import shutil
import zipfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import torch

from claim_runs_09 import DECOY, RUNS, STEPS, config, spec
from conftest import probe_launcher
from zerolab.run.model import TinyGPT

RANKS = 2
ZERO = [name for name, (stage, _, _) in RUNS.items() if stage > 0]  # the saves with optimizer-state files


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(root folder, each rank's report) of tests/claim_runs_09.py's saves."""
    from zerolab.handmade.core import harness

    root = tmp_path_factory.mktemp("claims09")
    with probe_launcher():
        ranks = harness.run({"kind": "claim_runs_09:saves", "root": str(root)}, RANKS, timeout=300, progress=False)
    return root, ranks


def tag_dir(root, name):
    return root / name / f"global_step{STEPS}"


def load(path):
    return torch.load(path, map_location="cpu", weights_only=False)


def model_numels(name):
    with torch.device("meta"):
        return {n: p.numel() for n, p in TinyGPT(spec(RUNS[name][2])).named_parameters()}


def quiet(function, *args, **kwargs):
    """DeepSpeed's converters print progress bars; the test's output stays readable."""
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        return function(*args, **kwargs)


def fp32_state_dict(folder, **kwargs):
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return quiet(get_fp32_state_dict_from_zero_checkpoint, str(folder), **kwargs)


def test_save_checkpoint_names_the_tag_after_the_global_step_and_writes_latest_last(saved):
    """Claim save-checkpoint-default-tag-and-latest-last: with no tag, the tag folder is global_step<N> for the
    engine's global step N, `latest` holds that name, and it is the last file rank 0 writes, after its model and
    optimizer states and the zero_to_fp32.py copy."""
    root, ranks = saved
    for name in RUNS:
        assert all(rank[name]["global_steps"] == STEPS for rank in ranks)
        assert (root / name / "latest").read_text() == f"global_step{STEPS}", name
        assert tag_dir(root, name).is_dir(), name
    writes = ranks[0]["stage2"]["writes"]
    assert writes[-1] == "latest", writes
    assert {"mp_rank_00_model_states.pt", "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt",
            "zero_to_fp32.py"} <= set(writes[:-1]), writes


def test_the_model_states_file_holds_the_whole_module_the_steps_and_the_config(saved):
    """Claim model-states-file-holds-module-steps-config: at stages 0-2 rank 0's mp_rank_00_model_states.pt holds
    the module's state dict whole in the training dtype, the step counters and the ds_config; from stage 1 on also
    every parameter's name and shape (param_shapes), which stage 0 leaves empty."""
    import deepspeed

    root, _ = saved
    for name in ("stage0", "stage1_fp32", "stage2"):
        stage, precision, _ = RUNS[name]
        state = load(tag_dir(root, name) / "mp_rank_00_model_states.pt")
        numels = model_numels(name)
        module = state["module"]
        assert {n: t.numel() for n, t in module.items()} == numels, name
        assert {t.dtype for t in module.values()} == {torch.bfloat16 if precision == "bf16" else torch.float32}
        micro = config(name)["train_micro_batch_size_per_gpu"]
        assert (state["global_steps"], state["global_samples"], state["skipped_steps"]) == \
            (STEPS, STEPS * micro * RANKS, 0), name
        assert state["ds_config"] == config(name) and state["ds_version"] == deepspeed.__version__, name
        if stage == 0:
            assert state["param_shapes"] is None
        else:
            shapes = {n: tuple(s) for group in state["param_shapes"] for n, s in group.items()}
            assert {n: math.prod(s) for n, s in shapes.items()} == numels, name


def test_at_stage_0_the_optimizer_state_is_in_the_model_states_file(saved):
    """Claim stage0-optimizer-in-the-model-states-file: a stage-0 save writes no optimizer-state file and no
    zero_to_fp32.py; the optimizer's state, fp32 master weights and Adam moments for every parameter, is in
    mp_rank_00_model_states.pt (at stages 1-3 that file's `optimizer` is None)."""
    root, _ = saved
    assert sorted(p.name for p in tag_dir(root, "stage0").iterdir()) == ["mp_rank_00_model_states.pt"]
    assert not (root / "stage0" / "zero_to_fp32.py").exists()
    optimizer = load(tag_dir(root, "stage0") / "mp_rank_00_model_states.pt")["optimizer"]
    whole = sum(model_numels("stage0").values())
    master = [t for group in optimizer["fp32_groups"] for t in group]
    assert sum(t.numel() for t in master) == whole and {t.dtype for t in master} == {torch.float32}
    moments = [state[key] for state in optimizer["optimizer_state_dict"]["state"].values()
               for key in ("exp_avg", "exp_avg_sq")]
    assert sum(t.numel() for t in moments) == 2 * whole and {t.dtype for t in moments} == {torch.float32}
    for name in ZERO:
        model_files = sorted(tag_dir(root, name).glob("*model_states.pt"))
        assert [load(path)["optimizer"] for path in model_files] == [None] * len(model_files), name
        assert (root / name / "zero_to_fp32.py").is_file(), name


def test_optimizer_state_files_are_bf16_prefixed_only_in_bf16(saved):
    """Claim optim-states-bf16-prefix-only-in-bf16: the optimizer-state files are bf16_zero_pp_rank_R_mp_rank_00_
    optim_states.pt in bf16 training and zero_pp_rank_R_mp_rank_00_optim_states.pt otherwise: in fp32 (the stage-1
    fp32 save) and in fp16, where DeepSpeed's bf16 switch, the only input of the prefix, is off."""
    import functools
    import types

    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.engine import DeepSpeedEngine

    root, _ = saved
    for name in ZERO:
        prefix = "bf16_" if RUNS[name][1] == "bf16" else ""
        assert sorted(p.name for p in tag_dir(root, name).glob("*optim_states.pt")) == \
            [f"{prefix}zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" for rank in range(RANKS)], name
    fp16 = DeepSpeedConfig({"train_batch_size": 2, "fp16": {"enabled": True}})
    assert fp16.float16_config.enabled and not fp16.bfloat16_config.enabled
    engine = types.SimpleNamespace()
    engine._get_zero_ckpt_prefix = functools.partial(DeepSpeedEngine._get_zero_ckpt_prefix, engine)
    named = DeepSpeedEngine._get_rank_zero_ckpt_name(engine, "ck", "t", 0, 1, fp16.bfloat16_config.enabled)
    assert named == os.path.join("ck", "t", "zero_pp_rank_1_mp_rank_00_optim_states.pt")


def _fp32_partition(optimizer_state, stage):
    """(the fp32 master partition, [exp_avg, exp_avg_sq]) of one rank's optimizer-state file."""
    if stage == 3:
        master, adam = optimizer_state["fp32_flat_groups"], optimizer_state["optimizer_state_dict"]["state"]
    else:
        master, adam = optimizer_state["single_partition_of_fp32_groups"], optimizer_state["base_optimizer_state"]
        adam = adam["state"]
    moments = [state[key] for state in adam.values() for key in ("exp_avg", "exp_avg_sq")]
    return master, moments


@pytest.mark.parametrize("name", ["stage1_fp32", "stage2", "stage3"])
def test_each_ranks_optimizer_file_holds_its_fp32_partition_of_master_and_moments(saved, name):
    """Claim optim-states-hold-the-ranks-fp32-partitions: at stages 1-3, in bf16 and fp32 training, rank R's
    optimizer-state file holds its 1/N of the fp32 master weights and of both Adam moments: 12 bytes per parameter
    over the N ranks (the partitions of all ranks add up to the model, padding aside)."""
    root, _ = saved
    stage = RUNS[name][0]
    whole = sum(model_numels(name).values())
    partitions = []
    for rank in range(RANKS):
        [path] = tag_dir(root, name).glob(f"*zero_pp_rank_{rank}_mp_rank_00_optim_states.pt")
        master, moments = _fp32_partition(load(path)["optimizer_state_dict"], stage)
        held = sum(t.numel() for t in master)
        assert {t.dtype for t in master + moments} == {torch.float32}, name
        assert sorted(t.numel() for t in moments) == sorted(t.numel() for t in master) * 2, name
        assert 4 * (held + sum(t.numel() for t in moments)) == 12 * held
        partitions.append(held)
    assert partitions == [partitions[0]] * RANKS, partitions
    padding = RANKS * len(model_numels(name))  # at most N - 1 elements a parameter (stage 3) or a group
    assert whole <= sum(partitions) < whole + padding, (partitions, whole)


def test_zero3_model_states_files_hold_a_placeholder_for_every_parameter(saved):
    """Claim zero3-model-states-files-hold-placeholders: at stage 3 save_checkpoint releases every parameter, the
    persistent ones included, before it saves the module, so each rank's model-states file holds an empty tensor for
    every parameter, and load_state_dict into the plain model refuses it with a size mismatch per parameter that
    reads torch.Size([0]) from the checkpoint."""
    root, ranks = saved
    for name in ("stage3", "stage3_default_gathered"):
        model = TinyGPT(spec(RUNS[name][2]))
        for rank in range(RANKS):
            module = load(tag_dir(root, name) / f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt")["module"]
            assert {n: t.numel() for n, t in module.items()} == {n: 0 for n in model_numels(name)}, name
            with pytest.raises(RuntimeError) as refused:
                model.load_state_dict(module)
            for parameter, tensor in model.named_parameters():
                assert (f"size mismatch for {parameter}: copying a param with shape torch.Size([0]) from checkpoint, "
                        f"the shape in current model is {tensor.shape}") in str(refused.value), parameter
    assert any(ranks[0]["stage3_default_gathered"]["held"].values())  # it held those whole until the save


def test_load_state_dict_casts_another_dtype():
    """Claim load-state-dict-casts-dtype (torch): load_state_dict copies a bf16 state dict into an fp32 model,
    casting: a dtype difference alone loads."""
    model = torch.nn.Linear(8, 4)
    state = {name: torch.randn(tensor.shape).to(torch.bfloat16) for name, tensor in model.state_dict().items()}
    model.load_state_dict(state, strict=True)
    for name, tensor in model.state_dict().items():
        assert tensor.dtype == torch.float32 and torch.equal(tensor, state[name].float()), name


def test_a_truncated_file_fails_in_torch_load(saved, tmp_path):
    """Claim truncated-file-fails-in-torch-load (torch): a checkpoint file cut short fails in torch.load itself,
    before any load_state_dict."""
    root, _ = saved
    whole = (tag_dir(root, "stage2") / "mp_rank_00_model_states.pt").read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises((RuntimeError, OSError, EOFError, pickle.UnpicklingError)):
        load(cut)


def test_zero_to_fp32_rebuilds_each_weight_from_the_fp32_master_partitions(saved, tmp_path):
    """Claim zero-to-fp32-rebuilds-from-the-fp32-master: deepspeed.utils.zero_to_fp32 (no engine) gives every
    parameter whole in fp32 from a stage 1, 2 or 3 save, taken from the optimizer-state files' fp32 master
    partitions: values no bf16 holds, unchanged when the model-states file's module is zeroed, and rounding to the
    16-bit weights the ranks trained. A stage-0 save, which has no optimizer-state files, it cannot consolidate."""
    root, _ = saved
    for name in ZERO:
        state = fp32_state_dict(root / name)
        assert {n: t.numel() for n, t in state.items()} == model_numels(name), name
        assert {t.dtype for t in state.values()} == {torch.float32}, name
        if RUNS[name][1] == "bf16":
            assert any(not torch.equal(t, t.to(torch.bfloat16).float()) for t in state.values()), name
        sixteen = root / name / "pytorch_model.bin"
        if sixteen.exists():
            trained = torch.load(sixteen, map_location="cpu", weights_only=True)
            assert all(torch.equal(state[n].to(trained[n].dtype), trained[n]) for n in state), name
    copy = tmp_path / "stage2"
    shutil.copytree(root / "stage2", copy)
    model_file = tag_dir(tmp_path, "stage2") / "mp_rank_00_model_states.pt"
    states = load(model_file)
    states["module"] = {n: torch.zeros_like(t) for n, t in states["module"].items()}
    torch.save(states, model_file)
    before, after = fp32_state_dict(root / "stage2"), fp32_state_dict(copy)
    assert all(torch.equal(before[n], after[n]) for n in before)
    with pytest.raises(Exception):
        fp32_state_dict(root / "stage0")


def test_zero_to_fp32_script_maps_the_optimizer_files_and_writes_one_shard_at_a_time(saved, tmp_path, monkeypatch):
    """Claim zero-to-fp32-memory: get_fp32_state_dict_from_zero_checkpoint returns the whole model as fp32 tensors
    in host memory; convert_zero_checkpoint_to_state_dict (what zero_to_fp32.py and zerolab ckpt consolidate run)
    maps the optimizer-state files (torch.load with mmap=True), reads the model-states file whole, and makes and
    writes the fp32 tensors one output shard (max_shard_size, 5GB by default) at a time."""
    import inspect

    from deepspeed.utils import zero_to_fp32

    root, _ = saved
    whole = fp32_state_dict(root / "stage2")
    assert all(type(t) is torch.Tensor and t.device.type == "cpu" for t in whole.values())
    assert sum(t.numel() * 4 for t in whole.values()) == 4 * sum(model_numels("stage2").values())
    assert inspect.signature(zero_to_fp32.convert_zero_checkpoint_to_state_dict).parameters[
        "max_shard_size"].default == "5GB"
    loads, made = [], []
    real_load, real_to_torch = zero_to_fp32.torch.load, zero_to_fp32.to_torch_tensor

    def watched_load(path, *args, **kwargs):
        loads.append((os.path.basename(path), kwargs.get("mmap", False)))
        return real_load(path, *args, **kwargs)

    def watched_to_torch(state_dict, return_empty_tensor=False, dtype=None):
        tensors = real_to_torch(state_dict, return_empty_tensor, dtype)
        if not return_empty_tensor:
            made.append(sum(t.numel() * t.element_size() for t in tensors.values()))
        return tensors

    monkeypatch.setattr(zero_to_fp32.torch, "load", watched_load)
    monkeypatch.setattr(zero_to_fp32, "to_torch_tensor", watched_to_torch)
    limit = 20_000
    quiet(zero_to_fp32.convert_zero_checkpoint_to_state_dict, str(root / "stage2"), str(tmp_path / "out"),
          max_shard_size=limit)
    assert sorted(loads) == [("bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt", True),
                             ("bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt", True),
                             ("mp_rank_00_model_states.pt", False)], loads
    shards = sorted(p.name for p in (tmp_path / "out").glob("pytorch_model-*.bin"))
    assert len(shards) == len(made) > 1 and max(made) <= limit and sum(made) == 4 * sum(model_numels("stage2").values())


@pytest.mark.parametrize("name", list(RUNS))
def test_save_16bit_model_writes_whole_weights_and_at_stage_3_only_when_gathering(saved, name):
    """Claim save-16bit-model-whole-and-gather-flag: save_16bit_model(dir) writes dir/pytorch_model.bin, the
    module's whole state dict in its training dtype (16-bit in bf16), which torch.load + load_state_dict(strict=True)
    read; at stage 3 only with stage3_gather_16bit_weights_on_model_save (default false): otherwise it writes nothing
    and returns False."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    assert DeepSpeedZeroConfig().gather_16bit_weights_on_model_save is False
    root, ranks = saved
    stage, precision, model_name = RUNS[name]
    gathers = config(name)["zero_optimization"].get("stage3_gather_16bit_weights_on_model_save", False)
    assert DeepSpeedZeroConfig(**config(name)["zero_optimization"]).gather_16bit_weights_on_model_save is gathers
    writes = stage < 3 or gathers
    assert [rank[name]["save_16bit_model"] for rank in ranks] == [writes] * RANKS
    path = root / name / "pytorch_model.bin"
    assert path.exists() is writes
    if writes:
        weights = torch.load(path, map_location="cpu", weights_only=True)
        assert {n: t.numel() for n, t in weights.items()} == model_numels(name)
        assert {t.dtype for t in weights.values()} == {torch.bfloat16 if precision == "bf16" else torch.float32}
        TinyGPT(spec(model_name)).load_state_dict(weights, strict=True)


def test_load_universal_reads_the_tag_from_latest_universal(saved):
    """Claim load-universal-reads-latest-universal: with "checkpoint": {"load_universal": true}, load_checkpoint
    with no tag reads the tag from latest_universal (here beside a decoy `latest` that names no folder) and loads the
    saved weights and step counts."""
    root, ranks = saved
    saved_module = load(tag_dir(root, "stage2") / "mp_rank_00_model_states.pt")["module"]
    assert (root / "universal" / "latest").read_text() == DECOY
    for rank in ranks:
        loaded = rank["universal"]
        assert loaded["path"] and Path(loaded["path"]).parent == root / "universal" / f"global_step{STEPS}"
        assert loaded["global_steps"] == STEPS and loaded["adam_steps"] == [STEPS]
        for name, values in loaded["params"].items():
            assert values == saved_module[name].float().flatten().tolist(), name


def test_ds_to_universal_converts_in_process_with_one_worker_each(saved, monkeypatch):
    """Claim ds-to-universal-in-process-with-one-worker: ds_to_universal.main takes its command-line arguments as an
    argparse.Namespace of seven fields (those its parser makes); with one extract and one merge worker it converts in the calling process (more workers start
    a ProcessPoolExecutor); it copies the model-states file into the output tag folder, writes latest_universal and
    no `latest` beside it, puts the optimizer's common state (param groups, loss scaler, clipping) in
    zero/optimizer_state.pt and Adam's step in each parameter's folder (step.pt), and deletes its tmp scratch
    folder."""
    import sys

    from deepspeed.checkpoint import ds_to_universal

    root, ranks = saved
    tag = f"global_step{STEPS}"
    assert ranks[0]["universal"]["converted"] == [tag, "latest_universal"]  # converted with the pool refused
    out = root / "universal" / tag
    assert (out / "mp_rank_00_model_states.pt").read_bytes() == \
        (tag_dir(root, "stage2") / "mp_rank_00_model_states.pt").read_bytes()
    assert not (out / "tmp").exists() and sorted(p.name for p in out.iterdir()) == ["mp_rank_00_model_states.pt", "zero"]
    common = load(out / "zero" / "optimizer_state.pt")
    assert common["param_groups"][0]["lr"] == config("stage2")["optimizer"]["params"]["lr"], common
    parameters = sorted(p for p in (out / "zero").iterdir() if p.is_dir())
    assert [p.name for p in parameters] == sorted(model_numels("stage2"))
    for parameter in parameters:
        assert sorted(p.name for p in parameter.iterdir()) == ["exp_avg.pt", "exp_avg_sq.pt", "fp32.pt", "step.pt"]
        assert int(load(parameter / "step.pt")) == STEPS, parameter.name
    monkeypatch.setattr(sys, "argv", ["ds_to_universal", "--input_folder", "a", "--output_folder", "b"])
    assert set(vars(ds_to_universal.parse_arguments())) == {
        "input_folder", "output_folder", "num_extract_workers", "num_merge_workers", "keep_temp_folder", "strict",
        "inject_missing_state"}
    pools = []

    class Pool:
        def __init__(self, max_workers=None):
            pools.append(max_workers)
            raise RuntimeError("no pool here")

    monkeypatch.setattr(ds_to_universal, "ProcessPoolExecutor", Pool)
    assert quiet(ds_to_universal._do_parallel_work, abs, [-1, -2], 1) == [1, 2] and pools == []
    with pytest.raises(RuntimeError, match="no pool here"):
        quiet(ds_to_universal._do_parallel_work, abs, [-1, -2], 2)
    assert pools == [2]


@pytest.mark.parametrize("name", ["stage1_fp32", "stage2", "stage3"])
def test_checkpoint_files_hold_a_few_kb_besides_their_tensors(saved, name):
    """Claim ckpt-files-a-few-kb-beyond-tensors: each file of a stage 1-3 save is its tensors' bytes plus a few kB
    of pickle (names, shapes, the ds_config, torch's zip records)."""
    root, _ = saved
    for path in tag_dir(root, name).glob("*.pt"):
        storages = {}

        def walk(item):
            if isinstance(item, torch.Tensor):
                storages[item.untyped_storage().data_ptr()] = item.untyped_storage().nbytes()
            elif isinstance(item, dict):
                list(map(walk, item.values()))
            elif isinstance(item, (list, tuple)):
                list(map(walk, item))

        walk(load(path))
        overhead = path.stat().st_size - sum(storages.values())
        assert 1_000 < overhead < 16_000, (path.name, overhead)


def test_torch_save_writes_a_zip_of_a_pickle_and_raw_storages(tmp_path):
    """Claim torch-save-zip-with-legacy-storage-names (torch): torch.save writes a zip whose <archive>/data.pkl
    describes the objects, naming each storage by its legacy class (torch.BFloat16Storage, torch.FloatStorage), and
    whose <archive>/data/<key> holds each storage's raw bytes."""
    tensors = {"weight": torch.randn(3, 5).to(torch.bfloat16), "master": torch.randn(7)}
    path = tmp_path / "t.pt"
    torch.save(tensors, path)
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        [pickled] = [n for n in names if n.endswith("/data.pkl")]
        folder = pickled.rsplit("/", 1)[0]
        data = archive.read(pickled)
        raw = {n.rsplit("/", 1)[1]: archive.read(n) for n in names if n.startswith(f"{folder}/data/")}
    strings = [arg for op, arg, _ in pickletools.genops(data) if isinstance(arg, str)]
    assert {"torch BFloat16Storage", "torch FloatStorage"} <= set(strings), strings
    assert sorted(raw.values(), key=len) == sorted(
        (t.contiguous().view(torch.uint8).numpy().tobytes() for t in tensors.values()), key=len)


def test_torch_adam_keeps_a_step_count_in_each_parameters_state():
    """Claim torch-adam-step-in-each-parameter-state (torch): torch's Adam(W) keeps the step count in each
    parameter's state, the same on every parameter it has stepped."""
    params = [torch.nn.Parameter(torch.randn(4)), torch.nn.Parameter(torch.randn(2, 3))]
    adam = torch.optim.AdamW(params, lr=1e-3)
    for _ in range(3):
        sum(p.sum() for p in params).backward()
        adam.step()
    assert [int(adam.state[p]["step"]) for p in params] == [3, 3]


def test_zero_to_fp32_refuses_a_save_missing_a_ranks_file(saved, tmp_path):
    """Claim zero-to-fp32-refuses-a-missing-rank-file: with one rank's optimizer-state file missing (a job killed
    during its save), zero_to_fp32 refuses to consolidate, saying how many files it expected."""
    root, _ = saved
    copy = tmp_path / "stage2"
    shutil.copytree(root / "stage2", copy)
    (tag_dir(tmp_path, "stage2") / "bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    with pytest.raises(ValueError, match=r"Expected 2 of '\*_optim_states.pt'"):
        fp32_state_dict(copy)


def test_deepspeed_warns_when_it_falls_back_to_the_cpu_accelerator(monkeypatch):
    """Claim deepspeed-warns-when-it-falls-back-to-cpu: where no GPU is found and DS_ACCELERATOR is unset, DeepSpeed
    (as on import) picks the CPU accelerator and logs a warning that says so; with DS_ACCELERATOR=cpu it picks the
    same accelerator without the warning."""
    import logging

    from deepspeed.accelerator import real_accelerator
    from deepspeed.utils import logger

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: DeepSpeed picks it, and says nothing of CPU")
    warnings = []
    handler = logging.Handler(level=logging.WARNING)
    handler.emit = warnings.append
    logger.addHandler(handler)
    try:
        picked = {}
        for setting in (None, "cpu"):
            if setting is None:
                monkeypatch.delenv("DS_ACCELERATOR", raising=False)
            else:
                monkeypatch.setenv("DS_ACCELERATOR", setting)
            monkeypatch.setattr(real_accelerator, "ds_accelerator", None)  # undone after the test
            start = len(warnings)
            picked[setting] = (real_accelerator.get_accelerator()._name,
                               [record.getMessage() for record in warnings[start:]])
    finally:
        logger.removeHandler(handler)
    name, said = picked[None]
    assert name == "cpu" and any("Setting accelerator to CPU" in message for message in said), said
    assert picked["cpu"] == ("cpu", [])
