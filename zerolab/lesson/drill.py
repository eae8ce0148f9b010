"""Lesson 07's multiple-choice questions: their options in the order the lesson lists them, and which is right.

The letters are placed so that no letter is right for more than about a third of the questions; the lesson's
option lists follow this order (tests/test_no_answers_in_sight.py compares them), and its tests take the key from
``key`` rather than from a letter typed into a cell.
"""
from zerolab.lesson.keyed import LETTERS, Keyed

# question -> ((option id, the option's English text), ...) in the order the lesson lists them
OPTIONS = {
    "Q02": (("fp16_and_momentum", "fp16 parameters + fp16 gradients + fp32 momentum"),
            ("fp32_grads", "fp32 gradients + fp32 momentum + fp32 variance"),
            ("six_bytes_each", "fp32 momentum + fp32 variance, 6 bytes each"),
            ("master_and_moments", "fp32 master weights + fp32 momentum + fp32 variance")),
    # claim: overlap-comm-default-by-stage  # claim: overlap-comm-second-bucket-at-stages-1-2
    "Q10": (("stage_dependent", "off by default for stages 0 to 2 and on for stage 3; in stages 1-2 it costs a second "
                                "bucket buffer"),
            ("everywhere_4_5x", "on by default for every stage; it costs 4.5x `reduce_bucket_size` of extra memory"),
            ("free", "off by default for every stage; it costs nothing"),
            ("faster", "on by default for stages 1 and 2 and off for stage 3; it makes communication faster")),
    "Q13": (("doubles_ram", "pinned memory is extra host memory on top of the offloaded state, so it doubles host RAM"),
            ("off_by_default", "it is off by default and should always be turned on"),
            # claim: offload-pin-memory-defaults-true  # claim: offload-pin-memory-pins-the-host-buffers
            ("page_locked", "it page-locks the host buffers so GPU copies run asynchronously at full PCIe speed; it is "
                            "on by default, and hosts with little RAM should turn it off"),
            ("gpu_pinned", "it pins the GPU memory so that PyTorch cannot free it")),
    "Q17": (("exactly_2", "exactly 2"),
            ("between_2_and_4", "more than 2 but less than 4"),
            ("exactly_4", "exactly 4"),
            ("partitioned", "nothing: ZeRO partitions activations over the GPUs")),
    "Q19": (("first_step", "DeepSpeed partitions the optimizer states only after the first step, so the first step "
                           "holds them whole"),
            ("no_gradients", "the calculator left out the gradients, which ZeRO never partitions"),
            ("allocator", "PyTorch's caching allocator frees nothing until the optimizer step ends"),
            # claim: hf-rmsnorm-keeps-fp32-input  # claim: hf-causal-lm-loss-fp32-vocabulary-gradient
            ("hf_activations", "the calculator counted activations as Megatron's GPT layer keeps them; Hugging Face's "
                               "Llama code keeps more (an fp32 copy of the input in each RMSNorm) and "
                               "starts backward with the loss's fp32 gradients over the whole vocabulary")),
    # claim: save-checkpoint-files-per-stage  # claim: optim-states-hold-the-ranks-fp32-partitions
    # claim: zero3-model-states-files-hold-placeholders
    # claim: ckpt-latest-beside-the-tag-folder
    "Q20": (("shards", "per rank: a model-states file whose weights are empty placeholders, and an optimizer-states "
                       "file with that rank's fp32 master weights and Adam moments (`latest` and the "
                       "`zero_to_fp32.py` script go one level up, beside the tag's folder)"),
            ("whole_fp32", "one file with the whole model in fp32, ready for `torch.load`"),
            ("whole_per_rank", "on every rank, the whole bf16 model and all its Adam states"),
            ("weights_only", "per rank, that rank's bf16 shard of the weights; the optimizer states are not saved")),
    "Q21": (("just_load", "nothing: `load_checkpoint` re-partitions the optimizer states for any number of ranks"),
            # claim: universal-checkpoint-per-parameter
            ("universal", "convert it with `python -m deepspeed.checkpoint.ds_to_universal`, then resume with "
                          "`\"checkpoint\": {\"load_universal\": true}`"),
            ("fp32_restart", "consolidate it with `zero_to_fp32` and resume from the fp32 weights: the Adam states "
                             "come back with them"),
            ("cannot", "nothing can: a ZeRO checkpoint resumes only on the number of ranks that saved it")),
    "Q22": (("async", "the save is asynchronous, and the file is written only after the job ends"),
            ("fp32_on_cpu", "ZeRO-3 keeps the weights only in fp32 on the CPU, where the save does not look"),
            # claim: zero3-state-dict-holds-placeholders
            ("placeholders", "outside forward and backward each rank holds only its shard, so the module's parameters "
                             "are empty placeholders, and `state_dict()` returns those"),
            ("bug", "a DeepSpeed bug: upgrading fixes it")),
    # claim: bf16-master-and-moments-make-k-6
    "Q23": (("checkpoint_only", "nothing: the two keys only change how checkpoints are written"),
            ("params_1_byte", "the 16-bit parameters shrink to 1 byte each"),
            ("k_6_partitioned", "the 12 bytes of optimizer state per parameter (master copy, momentum, variance) become "
                                "6, split over the 8 GPUs as before"),
            ("k_6_whole", "the 12 bytes become 6, but ZeRO no longer splits them, so each GPU holds all of them")),
    # claim: muon-momentum-in-the-gradient-dtype
    "Q24": (("one_bf16_momentum", "one momentum buffer in bf16: 2 bytes"),
            ("adam_moments", "Adam's two fp32 moments, 8 bytes, as for every other parameter"),
            ("nothing", "nothing: Newton-Schulz needs no state"),
            ("momentum_variance_update", "an fp32 momentum and an fp32 variance, 8 bytes, plus a copy of the "
                                         "orthogonalized update")),
}
RIGHT = {"Q23": "k_6_partitioned", "Q24": "one_bf16_momentum", "Q02": "master_and_moments", "Q10": "stage_dependent", "Q13": "page_locked", "Q17": "between_2_and_4",
         "Q19": "hf_activations", "Q20": "shards", "Q21": "universal", "Q22": "placeholders"}


_KEYED = Keyed(OPTIONS, RIGHT)


# Functions of this module, not the Keyed object's methods: a learner's cell that calls them is refused as using
# this module (zerolab.lesson.checks_source.off_limits matches what a call names by its module).
def letter(question, option):
    """The letter under which the lesson lists ``option`` (an option id) of ``question``."""
    return _KEYED.letter(question, option)


def key(question):
    """The right letter of ``question``."""
    return _KEYED.key(question)


def is_right(question, answer):
    """Whether ``answer`` (a letter, as zerolab.lesson.checks.choice returns it) is the right one."""
    return _KEYED.is_right(question, answer)


# Two answers that are not letters, kept here so that no visible test shows them.
# Q14: bf16 from Ampere (compute capability 8.0) on; fp16 with dynamic loss scaling before it.
COMPUTE_CAPABILITY = {"T4": (7, 5), "A100": (8, 0)}
# Q16: PyTorch FSDP's sharding strategies and the ZeRO stage closest to each (Hugging Face Accelerate's FSDP guide).
# claim: fsdp-strategies-and-zero-stages
FSDP_STAGE = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}


def precision(gpu):
    """The mixed precision to enable on ``gpu`` (a name in COMPUTE_CAPABILITY)."""
    return "bf16" if COMPUTE_CAPABILITY[gpu] >= (8, 0) else "fp16"
