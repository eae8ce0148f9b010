"""`zerolab ckpt` on real DeepSpeed checkpoints saved by 2 gloo CPU ranks (stages 1, 2, 3, a universal one made by
DeepSpeed's ds_to_universal, and a save killed half way), and on each kind of bad input. Every check compares with
an independent source: torch.load of the same files, the file system, the parameters the ranks held, DeepSpeed's
own loader. The folders are hashed before and after: zerolab ckpt never writes into a checkpoint."""
import hashlib
import os
import shutil
import subprocess
import sys

import pytest
import torch

from zerolab.ckpt.runs import checkpoint_config, resume_run, save_run
from zerolab.run import RunFailed

from test_run_measure import Watch, still_running

pytestmark = pytest.mark.slow

RANKS, STEPS = 2, 2


def zerolab(*args):
    return subprocess.run([sys.executable, "-m", "zerolab", *map(str, args)], capture_output=True, text=True,
                          env=dict(os.environ, DS_ACCELERATOR="cpu"), timeout=300)


def folder_hash(folder):
    digest = hashlib.sha256()
    for root, dirs, files in sorted(os.walk(folder)):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(root, name)
            digest.update(os.path.relpath(path, folder).encode())
            digest.update(str(os.stat(path).st_mtime_ns).encode())
            with open(path, "rb") as handle:
                digest.update(handle.read())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{name: (folder, per-rank results)} for stages 1-3 and the universal conversion of stage 2."""
    root = tmp_path_factory.mktemp("ckpt")
    found = {}
    for stage in (1, 2, 3):
        folder = root / f"stage{stage}"
        found[f"stage{stage}"] = (folder, save_run(checkpoint_config(stage=stage), folder, ranks=RANKS, steps=STEPS))
    universal = root / "stage2_universal"
    tag = (root / "stage2" / "latest").read_text().strip()
    subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder",
                    root / "stage2" / tag, "--output_folder", universal / tag], check=True, capture_output=True,
                   env=dict(os.environ, DS_ACCELERATOR="cpu"), timeout=300)
    found["universal"] = (universal, found["stage2"][1])
    return found


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """A stage-2 save in which rank 1 was SIGKILLed just before writing its optimizer-state file."""
    folder = tmp_path_factory.mktemp("killed") / "ck"
    watch = Watch()
    with pytest.raises(RunFailed) as failure:
        save_run(checkpoint_config(stage=2), folder, ranks=RANKS, steps=1, kill_rank_in_save=1, progress=watch)
    # rank 1's SIGKILL, or rank 0's gloo error when its peer vanished: whichever the launcher saw first
    assert failure.value.rank in (0, 1)
    assert still_running(watch.pids) == []
    assert not list(folder.glob("*/*zero_pp_rank_1_*optim_states.pt"))
    return folder


def test_latest_and_zero_to_fp32_sit_one_level_above_the_tag_folder(saved):
    """Lesson 07 Q20 and lesson 09 section 1: the tag's folder holds the ranks' .pt files only; `latest` and the
    copied `zero_to_fp32.py` are in the folder given to save_checkpoint."""
    for stage in (1, 2, 3):
        folder, _ = saved[f"stage{stage}"]
        tag = (folder / "latest").read_text().strip()
        assert (folder / "zero_to_fp32.py").is_file(), f"stage {stage}"
        assert [p.name for p in (folder / tag).iterdir() if p.suffix != ".pt"] == [], f"stage {stage}"


def test_zero3_state_dict_holds_placeholders_and_the_gather_flag_changes_only_save_16bit_model(saved, tmp_path):
    """Lesson 07 Q22: after ZeRO-3 training `model.state_dict()` returns empty placeholders, also with
    stage3_gather_16bit_weights_on_model_save set; the flag changes what save_16bit_model writes (whole weights)."""
    _, stage2 = saved["stage2"]
    whole = sum(len(values) for values in stage2[0]["final"]["params"].values())
    assert stage2[0]["state_dict_numel"] >= whole  # stage 2: the module holds every weight
    _, stage3 = saved["stage3"]
    gathered = save_run(checkpoint_config(stage=3, gather_16bit=True), tmp_path / "ck", ranks=RANKS, steps=1,
                        save_16bit="model.bin")
    assert [r["state_dict_numel"] for r in stage3 + gathered] == [0] * (2 * RANKS)
    weights = torch.load(tmp_path / "ck" / "model.bin", map_location="cpu", weights_only=True)
    assert sum(t.numel() for t in weights.values()) >= whole


def real_files(folder):
    tag = (folder / "latest").read_text().strip()
    return {path.name: path for path in (folder / tag).glob("*.pt")}


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_each_stage_writes_the_files_lesson_09_names(saved, stage):
    """Lesson 09's claim save-checkpoint-files-per-stage: below stage 3 rank 0 alone writes the module's bf16
    weights whole (mp_rank_00_model_states.pt); at stage 3 every rank writes a model-states file of its own; every
    rank writes its optimizer-states file, bf16_-prefixed in bf16."""
    folder, ranks = saved[f"stage{stage}"]
    files = real_files(folder)
    optim = {f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt" for rank in range(RANKS)}
    per_rank_models = {f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt" for rank in range(RANKS)}
    assert set(files) == optim | (per_rank_models if stage == 3 else {"mp_rank_00_model_states.pt"})
    if stage < 3:
        module = torch.load(files["mp_rank_00_model_states.pt"], map_location="cpu", weights_only=False)["module"]
        whole = sum(len(values) for values in ranks[0]["final"]["params"].values())
        assert {tensor.dtype for tensor in module.values()} == {torch.bfloat16}
        assert sum(tensor.numel() for tensor in module.values()) == whole


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_inspect_describes_each_stage_as_torch_load_sees_it(saved, stage):
    from zerolab.ckpt.inspect import inspect_checkpoint

    folder, _ = saved[f"stage{stage}"]
    before = folder_hash(folder)
    checkpoint = inspect_checkpoint(folder)
    files = real_files(folder)
    assert checkpoint.stage == stage and checkpoint.dp_world_size == RANKS and not checkpoint.universal
    assert checkpoint.tag == (folder / "latest").read_text().strip()
    assert {f.name for f in checkpoint.files} == set(files)
    for f in checkpoint.files:
        assert f.bytes == files[f.name].stat().st_size
        state = torch.load(files[f.name], map_location="cpu", weights_only=False)
        storages = {}

        def walk(item):
            if isinstance(item, torch.Tensor):
                storages[item.untyped_storage().data_ptr()] = (item.dtype, item.untyped_storage().nbytes())
            elif isinstance(item, dict):
                list(map(walk, item.values()))
            elif isinstance(item, (list, tuple)):
                list(map(walk, item))
            elif hasattr(item, "__dict__"):
                walk(vars(item))

        walk(state)
        by_dtype = {}
        for dtype, size in storages.values():
            name = str(dtype).replace("torch.", "")
            by_dtype[name] = by_dtype.get(name, 0) + size
        assert {d: b for d, b in f.tensor_bytes.items() if b} == {d: b for d, b in by_dtype.items() if b}, f.name
    optim = [f for f in checkpoint.files if f.kind == "optimizer states"]
    assert sorted(f.rank for f in optim) == list(range(RANKS))
    per_rank = {}
    for f in checkpoint.files:
        per_rank[f.rank] = per_rank.get(f.rank, 0) + files[f.name].stat().st_size
    assert checkpoint.per_rank_bytes() == per_rank
    assert checkpoint.empty_weights() == (stage == 3)
    assert folder_hash(folder) == before


def test_the_cli_prints_the_commands_and_they_work(saved, tmp_path):
    folder, ranks = saved["stage3"]
    before = folder_hash(folder)
    shown = zerolab("ckpt", "inspect", folder)
    assert shown.returncode == 0, shown.stderr
    assert "ZeRO stage 3" in shown.stdout and "empty placeholders" in shown.stdout
    script = next(line.strip() for line in shown.stdout.splitlines() if "zero_to_fp32.py" in line)
    out = tmp_path / "by_script"
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"]  # `python` is this venv's
    ran = subprocess.run(script.replace("OUT", str(out)), shell=True, capture_output=True, text=True,
                         env=dict(os.environ, DS_ACCELERATOR="cpu", PATH=path), timeout=300)
    assert ran.returncode == 0, ran.stderr
    assert set(torch.load(out / "pytorch_model.bin")) == set(ranks[0]["final"]["params"])
    assert folder_hash(folder) == before


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_consolidate_gives_the_weights_the_ranks_trained(saved, stage, tmp_path):
    folder, ranks = saved[f"stage{stage}"]
    before = folder_hash(folder)
    done = zerolab("ckpt", "consolidate", folder, tmp_path / "fp32")
    assert done.returncode == 0, done.stderr
    assert "consolidating" in done.stderr and "wrote 1 file(s)" in done.stderr
    state = torch.load(tmp_path / "fp32" / "pytorch_model.bin")
    trained = ranks[0]["final"]["params"]
    assert set(state) == set(trained)
    for name, values in trained.items():
        assert state[name].dtype == torch.float32
        # the ranks trained bf16 copies of these fp32 master weights
        assert state[name].to(torch.bfloat16).float().flatten().tolist() == values, name
    assert folder_hash(folder) == before


def test_consolidate_to_bf16_safetensors(saved, tmp_path):
    from safetensors.torch import load_file

    folder, ranks = saved["stage2"]
    done = zerolab("ckpt", "consolidate", folder, tmp_path / "st", "--dtype", "bf16", "--safetensors")
    assert done.returncode == 0, done.stderr
    state = load_file(tmp_path / "st" / "model.safetensors")
    assert {t.dtype for t in state.values()} == {torch.bfloat16}
    assert state["head.weight"].float().flatten().tolist() == ranks[0]["final"]["params"]["head.weight"]


def test_universal_is_recognised_and_resumes_on_three_ranks(saved):
    """Lesson 09's claim universal-checkpoint-per-parameter: one folder per parameter under zero/, each with its
    fp32 master and both Adam moments whole (no rank's partition left), and it resumes on another world size."""
    from zerolab.ckpt.inspect import inspect_checkpoint

    folder, ranks = saved["universal"]
    before = folder_hash(folder)
    tag = (folder / "latest_universal").read_text().strip()
    per_parameter = sorted(path for path in (folder / tag / "zero").iterdir() if path.is_dir())
    assert [p.name for p in per_parameter] == sorted(ranks[0]["final"]["params"])
    for parameter in per_parameter:
        files = {path.name: torch.load(path, map_location="cpu", weights_only=False) for path in parameter.iterdir()}
        assert {"fp32.pt", "exp_avg.pt", "exp_avg_sq.pt"} <= set(files), parameter
        whole = len(ranks[0]["final"]["params"][parameter.name])
        assert [files[name]["param"].numel() for name in ("fp32.pt", "exp_avg.pt", "exp_avg_sq.pt")] == [whole] * 3
    checkpoint = inspect_checkpoint(folder)
    assert checkpoint.universal and checkpoint.tag_source == "`latest_universal`"
    assert checkpoint.per_rank_bytes() == {}
    assert checkpoint.total_bytes == sum(p.stat().st_size for p in folder.rglob("*.pt"))
    assert "load_universal" in zerolab("ckpt", "inspect", folder).stdout
    resumed = resume_run(checkpoint_config(stage=2, load_universal=True), folder, ranks=3, steps=1)
    saved_state = ranks[0]["final"]
    for rank in resumed:
        assert rank["loaded"]["params"] == saved_state["params"]
        assert rank["loaded"]["global_steps"] == saved_state["global_steps"] == STEPS
        assert rank["final"]["global_steps"] == STEPS + 1
        assert rank["final"]["optimizer_step"] == STEPS + 1
    assert folder_hash(folder) == before


def ds_to_universal(tag_folder, out, *extra):
    return subprocess.run([sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", tag_folder,
                           "--output_folder", out, "--num_extract_workers", "1", "--num_merge_workers", "1", *extra],
                          capture_output=True, text=True, env=dict(os.environ, DS_ACCELERATOR="cpu"), timeout=300)


def without_universal_info(saved, stage, tmp_path):
    """A copy of the stage's tag folder whose model-states file lacks universal_checkpoint_info, as DeepSpeed writes
    it for a plain model when the caller passes no client_state."""
    folder = saved[f"stage{stage}"][0]
    tag = (folder / "latest").read_text().strip()
    copy = tmp_path / f"stage{stage}" / tag
    shutil.copytree(folder / tag, copy)
    for states in copy.glob("*model_states.pt"):
        state = torch.load(states, map_location="cpu", weights_only=False)
        assert state.pop("universal_checkpoint_info")["universal_checkpoint_version"] == 0.4
        torch.save(state, states)
    return copy


def test_ds_to_universal_needs_the_version_at_stages_1_and_2_only(saved, tmp_path):
    """Claim universal-info-needed-at-stages-1-2: the save must carry universal_checkpoint_info at stages 1-2 (its
    version is 0.4 in DeepSpeed 0.19.8, which --inject_missing_state adds); a stage-3 save converts without it."""
    from deepspeed.checkpoint.constants import UNIVERSAL_CHECKPOINT_VERSION_VALUE

    assert UNIVERSAL_CHECKPOINT_VERSION_VALUE == 0.4
    stage2 = without_universal_info(saved, 2, tmp_path)
    refused = ds_to_universal(stage2, tmp_path / "u2")
    assert refused.returncode != 0 and "universal_checkpoint_info state is missing" in refused.stderr, refused.stderr
    injected = ds_to_universal(stage2, tmp_path / "u2-injected", "--inject_missing_state")
    assert injected.returncode == 0, injected.stderr[-2000:]
    stage3 = ds_to_universal(without_universal_info(saved, 3, tmp_path), tmp_path / "u3")
    assert stage3.returncode == 0, stage3.stderr[-2000:]


def test_a_zero_checkpoint_refuses_another_world_size(saved):
    folder, _ = saved["stage2"]
    with pytest.raises(RunFailed) as failure:
        resume_run(checkpoint_config(stage=2), folder, ranks=3, steps=0)
    assert "world size" in str(failure.value).lower()


def assert_one_clear_line(result, words, folder, before):
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("zerolab: error: " + words), result.stderr
    assert "Traceback" not in result.stderr
    assert folder_hash(folder) == before


def test_not_a_checkpoint(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    before = folder_hash(tmp_path)
    assert_one_clear_line(zerolab("ckpt", "inspect", tmp_path), "not a DeepSpeed checkpoint", tmp_path, before)
    assert_one_clear_line(zerolab("ckpt", "consolidate", tmp_path, tmp_path.parent / "out"),
                          "not a DeepSpeed checkpoint", tmp_path, before)


def test_a_save_killed_on_one_rank(killed):
    before = folder_hash(killed)
    # rank 0 writes `latest` without waiting for the others: it names the tag rank 1 never finished
    assert (killed / "latest").exists()
    assert_one_clear_line(zerolab("ckpt", "inspect", killed), "incomplete checkpoint: rank 1", killed, before)
    assert_one_clear_line(zerolab("ckpt", "consolidate", killed, killed.parent / "out"),
                          "incomplete checkpoint: rank 1", killed, before)


def test_a_save_that_never_wrote_latest(saved, tmp_path):
    folder = tmp_path / "ck"
    shutil.copytree(saved["stage1"][0], folder)
    (folder / "latest").unlink()
    before = folder_hash(folder)
    result = zerolab("ckpt", "inspect", folder)
    assert_one_clear_line(result, "no `latest` file", folder, before)
    tag_dir = result.stderr.rsplit(" ", 1)[-1].strip()
    assert zerolab("ckpt", "inspect", tag_dir).returncode == 0


def test_a_truncated_file(saved, tmp_path):
    folder = tmp_path / "ck"
    shutil.copytree(saved["stage2"][0], folder)
    victim = sorted(real_files(folder).values())[-1]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    before = folder_hash(folder)
    assert_one_clear_line(zerolab("ckpt", "inspect", folder), "truncated", folder, before)
    assert_one_clear_line(zerolab("ckpt", "consolidate", folder, tmp_path / "out"), "truncated", folder, before)


def test_latest_names_a_missing_tag(saved, tmp_path):
    folder = tmp_path / "ck"
    shutil.copytree(saved["stage1"][0], folder)
    (folder / "latest").write_text("global_step999")
    before = folder_hash(folder)
    assert_one_clear_line(zerolab("ckpt", "inspect", folder), "missing tag folder", folder, before)


def test_inspect_loads_no_tensor(saved):
    """The CLI never imports torch: it reads the pickles' headers, never tensor data."""
    folder, _ = saved["stage3"]
    probe = ("import sys; from zerolab.cli.main import main; code = main(['ckpt', 'inspect', sys.argv[1]]); "
             "assert 'torch' not in sys.modules, 'torch was imported'; sys.exit(code)")
    result = subprocess.run([sys.executable, "-c", probe, folder], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
