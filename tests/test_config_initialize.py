"""`zerolab check` against a real deepspeed.initialize, for the rules DeepSpeed 0.19.8 enforces only there: bf16
master weights and gradients (bf16.bf16_master_weights_and_grads) with and without bf16 optimizer states, optimizer
offload and torch's Adam, at stages 1-3, on one CPU rank. check never says a config is fine that initialize
refuses, and when it refuses, it quotes DeepSpeed's reason."""
import itertools

import pytest

from conftest import probe_launcher
from zerolab.config import check_config

REASON = "Master weights feature requires"


def config(stage, master, states, offload, torch_adam):
    bf16 = {"enabled": True, "bf16_master_weights_and_grads": master, "bf16_optimizer_states": states}
    zero = {"stage": stage, **({"offload_optimizer": {"device": "cpu"}} if offload else {})}
    params = {"lr": 1e-3, **({"torch_adam": True} if torch_adam else {})}
    return {"train_micro_batch_size_per_gpu": 2, "bf16": bf16, "zero_optimization": zero,
            "optimizer": {"type": "AdamW", "params": params}}


# Without offload the optimizer is torch's (torch_adam): DeepSpeed's own would be FusedAdam, an op this CPU machine
# would compile for minutes, and initialize builds the optimizer before it checks the master weights.
CASES = [config(stage, True, states, offload, torch_adam)
         for stage, states, offload, torch_adam in itertools.product((1, 2, 3), (False, True), (False, True),
                                                                     (False, True)) if offload or torch_adam]
CASES += [config(2, False, False, False, True),  # no bf16 master weights: the usual config
          config(2, False, True, False, True),  # bf16 states without bf16 master weights: the config class refuses
          config(0, True, False, True, False)]  # bf16 master weights without ZeRO: the config class refuses


@pytest.fixture(scope="module")
def initialized():
    """DeepSpeed's answer to each case, from one rank."""
    from zerolab.handmade.core import harness

    with probe_launcher():
        [outcomes] = harness.run({"kind": "rank_probe:deepspeed_initializes", "configs": CASES}, 1, timeout=300,
                                 progress=False)
    return outcomes


@pytest.mark.parametrize("index", range(len(CASES)))
def test_check_refuses_exactly_what_initialize_refuses(initialized, index):
    case, outcome = CASES[index], initialized[index]
    report = check_config(case)
    errors = " ".join(finding.message for finding in report.findings if finding.severity == "error")
    assert report.valid == outcome["accepted"], (case, outcome, errors)
    if REASON in outcome["error"]:
        assert REASON in errors, (outcome["error"], errors)


def test_the_grid_has_both_answers(initialized):
    accepted = [outcome["accepted"] for outcome in initialized]
    assert any(accepted) and not all(accepted)
    assert sum(REASON in outcome["error"] for outcome in initialized) >= 6


def test_explain_describes_both_keys_and_what_true_costs():
    from zerolab.config.field_notes import describe

    for key, words in (("bf16_master_weights_and_grads", "2 bytes a parameter instead of 4"),
                       ("bf16_optimizer_states", "4 bytes a parameter instead of 8")):
        said = describe(f"bf16.{key}", True, CASES[0])
        assert "no description" not in said and words in said, said
