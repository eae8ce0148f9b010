"""What a DeepSpeed checkpoint folder holds, read from file headers only (no DeepSpeed engine, no tensor data).

    from zerolab.ckpt.inspect import inspect_checkpoint
    checkpoint = inspect_checkpoint("checkpoints/")      # the save_dir, or one tag folder inside it
    print("\\n".join(checkpoint.lines()))

Bad input raises CheckpointError (a UserError: the CLI prints its one line and exits 2): not a checkpoint, a
rank's file missing (a job killed during its save), a truncated file, a `latest` tag with no folder.
Nothing in the folder is written to.
"""
import os
import re
from dataclasses import dataclass, field

from zerolab.ckpt.headers import NotATorchFile, read_header, storage_bytes
from zerolab.errors import UserError

# claim: save-checkpoint-files-per-stage
MODEL_ZERO3 = re.compile(r"^zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt$")
MODEL_WHOLE = re.compile(r"^mp_rank_(\d+)_model_states\.pt$")
# claim: optim-states-bf16-prefix-only-in-bf16
OPTIM = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
# claim: universal-checkpoint-per-parameter
UNIVERSAL_STATES = ("fp32.pt", "exp_avg.pt", "exp_avg_sq.pt")
# claim: save-16bit-model-whole-and-gather-flag
SIXTEEN_BIT_FILES = ("pytorch_model.bin", "model.safetensors")
DTYPE_SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


class CheckpointError(UserError):
    """A folder that is not a usable DeepSpeed checkpoint; the message says which and what to do."""


@dataclass
class CheckpointFile:
    name: str
    kind: str  # "model states" | "optimizer states" | "universal"
    rank: object  # the data-parallel rank that wrote it; None for universal files
    bytes: int
    tensor_bytes: dict  # {dtype: bytes} of the tensors inside


@dataclass
class Checkpoint:
    folder: str
    tag: str
    tag_source: str  # "latest", "latest_universal" or "folder given"
    universal: bool
    stage: int
    dp_world_size: int
    mp_world_size: int
    global_steps: object
    ds_version: str
    has_universal_info: bool
    files: list = field(default_factory=list)
    sixteen_bit_files: list = field(default_factory=list)

    @property
    def tag_dir(self):
        return os.path.join(self.folder, self.tag)

    @property
    def total_bytes(self):
        return sum(f.bytes for f in self.files)

    def per_rank_bytes(self):
        """{rank: bytes on disk of the files that rank wrote}; empty for a universal checkpoint."""
        totals = {}
        for f in self.files:
            if f.rank is not None:
                totals[f.rank] = totals.get(f.rank, 0) + f.bytes
        return dict(sorted(totals.items()))

    def dtypes(self):
        """{kind: {dtype: bytes}} over every file."""
        found = {}
        for f in self.files:
            kind = found.setdefault(f.kind, {})
            for dtype, size in f.tensor_bytes.items():
                kind[dtype] = kind.get(dtype, 0) + size
        return found

    def empty_weights(self):
        """True when the module files hold only placeholders (a ZeRO-3 save_checkpoint, whatever the gather flag)."""
        model = [f for f in self.files if f.kind == "model states"]
        return bool(model) and not any(sum(f.tensor_bytes.values()) for f in model)

    def commands(self):
        """[(what, shell command)]: how to consolidate, convert or load this checkpoint."""
        folder, out = _quote(self.folder), "OUT"
        if self.universal:
            # claim: universal-checkpoint-per-parameter # claim: load-universal-reads-latest-universal
            return [("resume on any number of ranks",
                     f'ds_config "checkpoint": {{"load_universal": true}}, then engine.load_checkpoint({self.folder!r})')]
        if self.stage == 0:
            # claim: model-states-file-holds-module-steps-config # claim: stage0-optimizer-in-the-model-states-file
            return [("load", f"torch.load({os.path.join(self.tag_dir, 'mp_rank_00_model_states.pt')!r})"
                             "['module']  (stage 0: the weights are whole in the model-states file)")]
        script = os.path.join(self.folder, "zero_to_fp32.py")
        # claim: zero-to-fp32-script-in-the-folder
        deepspeed_own = (f"python {_quote(script)} {folder} {out}" if os.path.isfile(script)
                         else f"python -m deepspeed.utils.zero_to_fp32 {folder} {out}")
        universal_dir = self.folder.rstrip(os.sep) + "_universal"
        convert = (f"python -m deepspeed.checkpoint.ds_to_universal --input_folder {_quote(self.tag_dir)} "
                   f"--output_folder {_quote(os.path.join(universal_dir, self.tag))}")
        if not self.has_universal_info:
            # claim: universal-info-needed-at-stages-1-2
            convert += " --inject_missing_state"
        return [("consolidate to one fp32 state dict", f"zerolab ckpt consolidate {folder} {out}"),
                ("the same with DeepSpeed's own script", deepspeed_own),
                ("convert to universal (resume on another number of ranks)", convert)]

    def lines(self):
        kind = "universal checkpoint" if self.universal else f"ZeRO stage {self.stage} checkpoint"
        out = [f"checkpoint  {self.folder}  (tag {self.tag}, from {self.tag_source})",
               f"format      {kind}, saved by {self.dp_world_size} data-parallel rank(s) x {self.mp_world_size} "
               f"model-parallel; global step {self.global_steps}; DeepSpeed {self.ds_version}"]
        if self.universal:
            params = len({f.name.split(os.sep)[0] for f in self.files if f.kind == "universal" and os.sep in f.name})
            out.append(f"complete    yes: the model-states file and {params} parameter folders with "
                       f"{', '.join(UNIVERSAL_STATES)}")
            # claim: universal-checkpoint-per-parameter
            out.append("universal   yes: loads on any number of ranks")
        else:
            optim = sum(f.kind == "optimizer states" for f in self.files)
            model = sum(f.kind == "model states" for f in self.files)
            out.append(f"complete    yes: {model} model-states file(s), {optim} optimizer-state file(s)")
            # claim: zero-checkpoint-cut-for-its-world-size
            out.append("universal   no: loads only on " f"{self.dp_world_size} data-parallel rank(s)")
        out.append("dtypes      " + "; ".join(
            f"{kind}: " + ", ".join(f"{DTYPE_SHORT.get(d, d)} {_size(b)}" for d, b in sorted(sizes.items()))
            for kind, sizes in self.dtypes().items()))
        if self.empty_weights():
            # claim: zero3-model-states-files-hold-placeholders # claim: optim-states-hold-the-ranks-fp32-partitions
            out.append("weights     the model-states files hold empty placeholders (ZeRO-3's save_checkpoint saves no whole weight):"
                       " the weights exist only as fp32 partitions in the optimizer states; consolidate them")
        for name in self.sixteen_bit_files:
            # claim: save-16bit-model-whole-and-gather-flag
            loader = "safetensors.torch.load_file" if name.endswith(".safetensors") else "torch.load"
            out.append(f"16-bit      {name}: a whole 16-bit state dict (save_16bit_model writes pytorch_model.bin), loads "
                       f"with {loader}")
        if not self.universal:
            out.append("files")
            width = max(len(f.name) for f in self.files)
            for f in self.files:
                out.append(f"  rank {f.rank}  {f.name:<{width}}  {_size(f.bytes):>10}")
            out.append("per rank    " + ", ".join(f"rank {r}: {_size(b)}" for r, b in self.per_rank_bytes().items()))
        out.append(f"total       {_size(self.total_bytes)} in {len(self.files)} file(s)")
        for what, command in self.commands():
            out.append(f"{what}:\n  {command}")
        return out

    def as_dict(self):
        return {"folder": self.folder, "tag": self.tag, "tag_source": self.tag_source, "universal": self.universal,
                "stage": self.stage, "dp_world_size": self.dp_world_size, "mp_world_size": self.mp_world_size,
                "global_steps": self.global_steps, "ds_version": self.ds_version, "complete": True,
                "per_rank_bytes": self.per_rank_bytes(), "total_bytes": self.total_bytes, "dtypes": self.dtypes(),
                "empty_weights": self.empty_weights(), "sixteen_bit_files": self.sixteen_bit_files,
                "files": [vars(f) for f in self.files],
                "commands": [{"what": w, "command": c} for w, c in self.commands()]}


def inspect_checkpoint(path, tag=None):
    """Describe the checkpoint at ``path`` (a save_dir with `latest`, or one tag folder)."""
    path = os.path.abspath(os.fspath(path))
    if not os.path.isdir(path):
        raise CheckpointError(f"not a folder: {path} (give the save_dir passed to save_checkpoint, or a tag folder)")
    folder, tag, source = _locate(path, tag)
    tag_dir = os.path.join(folder, tag)
    if os.path.isdir(os.path.join(tag_dir, "zero")):
        return _universal(folder, tag, source)
    return _zero(folder, tag, source)


def _locate(path, tag):
    if tag is not None:
        if not os.path.isdir(os.path.join(path, tag)):
            raise CheckpointError(f"missing tag folder: {os.path.join(path, tag)} does not exist")
        return path, tag, "--tag"
    for name in ("latest_universal", "latest"):
        tag_file = os.path.join(path, name)
        if os.path.isfile(tag_file):
            with open(tag_file) as handle:
                named = handle.read().strip()
            if not named or not os.path.isdir(os.path.join(path, named)):
                raise CheckpointError(
                    f"missing tag folder: `{name}` names tag {named!r}, but {os.path.join(path, named)} does not "
                    "exist (moved, deleted, or copied without it); inspect a tag folder that is there instead")
            return path, named, f"`{name}`"
    if _model_files(path):
        return os.path.dirname(path), os.path.basename(path), "folder given"
    tags = sorted(name for name in os.listdir(path) if _model_files(os.path.join(path, name)))
    if tags:
        raise CheckpointError(
            # claim: save-checkpoint-default-tag-and-latest-last
            f"no `latest` file in {path}: DeepSpeed writes it last, so the save that made tag(s) "
            f"{', '.join(tags)} may not have finished; inspect one: zerolab ckpt inspect {os.path.join(path, tags[-1])}")
    raise CheckpointError(f"not a DeepSpeed checkpoint: {path} has no `latest` file and no *_model_states.pt files")


def _model_files(folder):
    if not os.path.isdir(folder):
        return []
    return sorted(n for n in os.listdir(folder) if MODEL_ZERO3.match(n) or MODEL_WHOLE.match(n))


def _header(path):
    try:
        return read_header(path)
    except NotATorchFile as error:
        raise CheckpointError(f"truncated or not a torch file: {path} ({error}); the save was cut short or the copy "
                              "is incomplete: use an earlier tag or copy it again") from None
    except OSError as error:
        raise CheckpointError(f"cannot read {path}: {error.strerror}") from None


def _common(model_path):
    state = _header(model_path)
    if not isinstance(state, dict) or "dp_world_size" not in state:
        raise CheckpointError(f"not a DeepSpeed model-states file: {model_path} (it has no dp_world_size)")
    config = state.get("ds_config") if isinstance(state.get("ds_config"), dict) else {}
    stage = int((config.get("zero_optimization") or {}).get("stage", 0))
    return state, stage


def _file(folder, name, kind, rank, header=None):
    path = os.path.join(folder, name)
    header = _header(path) if header is None else header
    return CheckpointFile(name, kind, rank, os.path.getsize(path), storage_bytes(header))


def _zero(folder, tag, source):
    tag_dir = os.path.join(folder, tag)
    names = sorted(os.listdir(tag_dir))
    whole = [n for n in names if MODEL_WHOLE.match(n)]
    zero3 = [n for n in names if MODEL_ZERO3.match(n)]
    if not whole and not zero3:
        raise CheckpointError(f"not a DeepSpeed checkpoint: {tag_dir} holds no *_model_states.pt file")
    first = os.path.join(tag_dir, (zero3 or whole)[0])
    state, stage = _common(first)
    dp, mp = int(state["dp_world_size"]), int(state.get("mp_world_size") or 1)
    checkpoint = Checkpoint(folder, tag, source, False, stage, dp, mp, state.get("global_steps"),
                            str(state.get("ds_version", "?")), "universal_checkpoint_info" in state,
                            sixteen_bit_files=[n for n in SIXTEEN_BIT_FILES if os.path.isfile(os.path.join(folder, n))])
    expected_model = ([f"zero_pp_rank_{r}_mp_rank_{m:02d}_model_states.pt" for m in range(mp) for r in range(dp)]
                      if stage == 3 else [f"mp_rank_{m:02d}_model_states.pt" for m in range(mp)])
    optim = {OPTIM.match(n).groups(): n for n in names if OPTIM.match(n)}
    for name in expected_model:
        if name not in names:
            rank = MODEL_ZERO3.match(name).group(1) if stage == 3 else 0
            raise _missing(tag_dir, name, rank, dp)
        rank = int(MODEL_ZERO3.match(name).group(1)) if stage == 3 else 0
        checkpoint.files.append(_file(tag_dir, name, "model states", rank))
    if stage > 0:
        for m in range(mp):
            for r in range(dp):
                name = optim.get((str(r), f"{m:02d}"))
                if name is None:
                    raise _missing(tag_dir, f"zero_pp_rank_{r}_mp_rank_{m:02d}_optim_states.pt", r, dp)
                checkpoint.files.append(_file(tag_dir, name, "optimizer states", r))
    return checkpoint


# claim: latest-written-by-rank-0-without-waiting # claim: zero-to-fp32-refuses-a-missing-rank-file
def _missing(tag_dir, name, rank, dp):
    return CheckpointError(
        f"incomplete checkpoint: rank {rank}'s file {name} is missing from {tag_dir} (a {dp}-rank save needs one per "
        "rank; a job killed during its save leaves this): it cannot be loaded or consolidated, use an earlier tag")


def _universal(folder, tag, source):
    tag_dir = os.path.join(folder, tag)
    whole = [n for n in sorted(os.listdir(tag_dir)) if MODEL_WHOLE.match(n) or MODEL_ZERO3.match(n)]
    if not whole:
        raise CheckpointError(f"incomplete universal checkpoint: {tag_dir} has a zero/ folder but no "
                              # claim: ds-to-universal-in-process-with-one-worker
                              "mp_rank_00_model_states.pt (ds_to_universal copies it there)")
    state, stage = _common(os.path.join(tag_dir, whole[0]))
    checkpoint = Checkpoint(folder, tag, source, True, stage, int(state["dp_world_size"]),
                            int(state.get("mp_world_size") or 1), state.get("global_steps"),
                            str(state.get("ds_version", "?")), True)
    for name in whole:
        checkpoint.files.append(_file(tag_dir, name, "model states", None))
    expected = []
    for group in state.get("param_shapes") or []:
        expected += list(group) if isinstance(group, dict) else []
    zero_dir = os.path.join(tag_dir, "zero")
    for param in expected or sorted(os.listdir(zero_dir)):
        for state_name in UNIVERSAL_STATES:
            if not os.path.isfile(os.path.join(zero_dir, param, state_name)):
                raise CheckpointError(f"incomplete universal checkpoint: {os.path.join(zero_dir, param, state_name)}"
                                      " is missing; run ds_to_universal again into an empty folder")
        names = sorted(n for n in os.listdir(os.path.join(zero_dir, param)) if n.endswith(".pt"))
        for name in names:
            checkpoint.files.append(_file(zero_dir, os.path.join(param, name), "universal", None))
    for name in sorted(os.listdir(zero_dir)):  # the optimizer's common state (param groups; each step count is in a parameter's step.pt)  # claim: ds-to-universal-in-process-with-one-worker
        if name.endswith(".pt") and os.path.isfile(os.path.join(zero_dir, name)):
            checkpoint.files.append(_file(zero_dir, name, "universal", None))
    return checkpoint


def _size(n):
    for unit, size in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def _quote(path):
    import shlex

    return shlex.quote(path)
