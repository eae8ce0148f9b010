"""Lesson 10's keyed questions: their options in the order the lesson lists them, and which is right.

As for lesson 07 (zerolab.lesson.drill), the lesson's tests take the key from ``key`` rather than from a letter typed
into a cell, and a cell that reads this module is graded 0 (off_limits in the hidden tests).
"""
from zerolab.lesson.keyed import LETTERS, Keyed

# question -> ((option id, the option's English text), ...) in the order the lesson lists them
OPTIONS = {
    # claim: dividing-the-loss-by-gas-scales-twice  # claim: torch-style-backward-scales-by-gas
    # claim: stage0-refuses-torch-style-backward
    "BACKWARD": (("divide_yourself", "`loss = engine(tokens, targets)` then `(loss / 4).backward()`"),
                 ("plain", "`loss = engine(tokens, targets)` then `loss.backward()`"),
                 ("engine_divided", "`loss = engine(tokens, targets)` then `engine.backward(loss / 4)`"),
                 ("refused", "none of these: DeepSpeed refuses `loss.backward()` on every engine")),
    # claim: zero3-every-rank-runs-every-module  # claim: zero3-persistence-and-external-parameters-still-hang
    # claim: zero3-prefetch-0-pairs-all-gathers-in-order
    "FIX": (("persist", "set `stage3_param_persistence_threshold` high enough that every parameter stays whole on "
                        "every rank"),
            ("external", "register `l1`'s parameters on the network with "
                         "`deepspeed.zero.register_external_parameter`"),
            ("prefetch_0", "set `stage3_prefetch_bucket_size` to 0, so nothing is fetched ahead"),
            ("every_rank_runs_it", "run `l1` on every rank, and on the rank that skips it add `0 * output.sum()` "
                                   "instead of using its output")),
}
RIGHT = {"BACKWARD": "plain", "FIX": "every_rank_runs_it"}


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


# Exercise 5: the first feature to reach for in each situation, and why each other one does not fit. The reasons
# restate DeepSpeed's published figures and requirements (lesson 10, section 6), never the answer.
SITUATIONS = ("S1", "S2", "S3", "S4", "S5")
FEATURES = ("deepcompile", "zenflow", "superoffload", "autotp", "ulysses", "zeropp")
PICKS = {"S1": "deepcompile", "S2": "zenflow", "S3": "superoffload", "S4": "ulysses", "S5": "zeropp"}
# what each situation is limited by, said without naming a feature
LIMIT = {
    "S1": "S1 has memory and bandwidth to spare; what it lacks is overlap: collectives issued just in time",
    "S2": "S2's time goes to the GPUs waiting for the CPU's optimizer step over PCIe",
    "S3": "S3 offloads over a 900 GB/s NVLink-C2C link, not PCIe",
    "S4": "S4 runs out of memory on activations that grow with the sequence, not on model states",
    "S5": "S5 is limited by the bytes its collectives send over a slow network",
}
# what each feature changes, said without naming a situation
CHANGES = {
    "deepcompile": "DeepCompile schedules the same collectives better; it sends no fewer bytes and keeps no fewer "
                   "activations",
    "zenflow": "ZenFlow hides the CPU optimizer step of ZeRO-Offload at stages 1-2, measured on PCIe machines",
    "superoffload": "SuperOffload is built for a Superchip's CPU-GPU link, and needs one",
    "autotp": "AutoTP splits the layers' weights inside a fast tensor-parallel group; DeepSpeed publishes no speed "
              "figure for it",
    "ulysses": "Ulysses splits the sequence (the activations) over the GPUs; it adds all-to-alls",
    "zeropp": "ZeRO++ sends fewer bytes (quantized weights and gradients, a secondary partition per node)",
}


def why_not(situation, feature):
    """None when ``feature`` is the pick for ``situation``; else why it does not fit, (what the feature changes,
    what the situation is limited by), naming neither the pick nor the situation's feature."""
    if PICKS[situation] == feature:
        return None
    return CHANGES[feature], LIMIT[situation]
