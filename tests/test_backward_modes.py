"""engine.backward(loss) against plain loss.backward() on 2 CPU ranks (zerolab.run.backward, lesson 10), checked
against a single process of plain torch that averages the gradients of the whole global batch and steps SGD."""
import pytest
import torch

from leftovers import ranks_left
from zerolab.run import backward
from zerolab.run.launch import launch
from zerolab.run.model import ModelSpec, TinyGPT, synthetic_batch

pytestmark = pytest.mark.slow
RANKS = 2
STEPS = 2


@pytest.fixture(scope="module")
def runs():
    found = {stage: launch(backward.job(stage, STEPS, return_params=True), RANKS, timeout=300,
                           worker="zerolab.run.backward") for stage in (0, 2, 3)}
    assert not ranks_left(), "a rank outlived its run"
    return found


def reference_params(job):
    """SGD on the mean loss over every rank's micro-batches of each step: what data parallelism with gradient
    accumulation is meant to compute."""
    spec, micro = ModelSpec(**job["model"]), job["config"]["train_micro_batch_size_per_gpu"]
    gas = job["config"]["gradient_accumulation_steps"]
    torch.manual_seed(0)
    model = TinyGPT(spec)
    optimizer = torch.optim.SGD(model.parameters(), lr=job["lr"])
    for step in range(job["steps"]):
        optimizer.zero_grad()
        for rank in range(RANKS):
            for index in range(gas):
                tokens, targets = synthetic_batch(spec, micro, step * gas + index, rank)
                (model(tokens, targets) / (gas * RANKS)).backward()
        optimizer.step()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_engine_backward_is_sgd_on_the_mean_of_the_global_batch(runs, stage):
    want = reference_params(backward.job(stage, STEPS))
    for rank in runs[stage]:
        got = torch.tensor(rank["engine"]["params"])
        assert (got - want).abs().max() < 1e-5


@pytest.mark.parametrize("stage", [2, 3])
def test_plain_loss_backward_trains_exactly_like_engine_backward(runs, stage):
    """Claim torch-style-backward-scales-by-gas."""
    for rank in runs[stage]:
        assert rank["plain"]["grad_norms"] == rank["engine"]["grad_norms"]
        assert rank["plain"]["params"] == rank["engine"]["params"]


@pytest.mark.parametrize("stage", [2, 3])
def test_dividing_the_loss_by_gas_yourself_divides_twice(runs, stage):
    """Claim dividing-the-loss-by-gas-scales-twice: the first step's gradients come out 1/gas of engine.backward's
    (from the same parameters); the smaller update then sends the run elsewhere."""
    gas = backward.ACCUMULATION
    for rank in runs[stage]:
        halved, right = rank["plain, loss / gas"]["grad_norms"][0], rank["engine"]["grad_norms"][0]
        assert halved == pytest.approx(right / gas, rel=1e-5)
        assert rank["plain, loss / gas"]["max_param_difference"] > 1e-4


def test_stage_0_refuses_plain_backward_and_names_the_call_to_use(runs):
    """Claim stage0-refuses-torch-style-backward."""
    for rank in runs[0]:
        for mode in ("plain", "plain, loss / gas"):
            message = rank[mode]["error"]
            assert "Direct calls to tensor.backward() are not supported" in message and "engine.backward(loss)" in message


def test_the_table_shows_each_way_and_the_refusal(runs):
    lines = backward.table(runs[0]).splitlines()
    assert [line.split("  ")[0] for line in lines[1:]] == list(backward.MODES)
    assert "not supported" in lines[2]
