"""A ZeRO-3 hang reproduced on 2 CPU ranks (zerolab.run.hang, lesson 10): rank 1 skips a layer in step 1, and gloo's
timeout ends the wait. What each rank waited in is read from the traceback of its own timeout; the fixes are judged by
whether both ranks finish with the same parameters."""
import pytest

from leftovers import ranks_left
from zerolab.run import hang

pytestmark = pytest.mark.slow
# A fix that hangs is given a short timeout; one expected to finish a long one, so a slow start never reads as a hang.
TIMEOUT_S = {"none": 5, "persist": 3, "external": 3, "mask": 30}


@pytest.fixture(scope="module")
def runs():
    found = {fix: hang.reproduce(fix, timeout_s=TIMEOUT_S[fix], progress=False) for fix in TIMEOUT_S}
    assert not ranks_left(), "a rank outlived its run"
    return found


def test_the_skip_leaves_each_rank_waiting_in_a_different_collective(runs):
    """Claim zero3-skip-hangs-in-different-collectives."""
    ran_everything, skipped = runs["none"]
    assert not ran_everything["finished"] and not skipped["finished"]
    assert (ran_everything["step"], skipped["step"]) == (hang.SKIP_STEP, hang.SKIP_STEP)
    assert ran_everything["phase"] == "backward" and ran_everything["collective"] == "reduce_scatter_tensor"
    assert skipped["phase"] == "forward" and "fetch_sub_module" in skipped["collective"]
    assert skipped["model_line"] == "return self.l2(h)"  # waiting for the next layer, not the one it skipped


@pytest.mark.parametrize("fix", ["none", "persist", "external"])
def test_gloos_timeout_ends_the_wait_on_every_rank(runs, fix):
    """Claim gloo-timeout-ends-zero3-hang: the first rank to reach the timeout raises it, and gloo closes the
    connection, which ends the other rank's wait too if its own timeout has not come yet."""
    errors = [rank["error"] for rank in runs[fix]]
    assert any(f"Timed out waiting {TIMEOUT_S[fix] * 1000}ms" in error for error in errors), errors
    assert all("Timed out waiting" in error or "Connection closed by peer" in error for error in errors), errors


def test_running_the_layer_on_every_rank_makes_the_skip_safe(runs):
    """Claim zero3-every-rank-runs-every-module: masking finishes, with the same parameters on both ranks."""
    first, second = runs["mask"]
    assert first["finished"] and second["finished"]
    assert first["param_sum"] == second["param_sum"]


@pytest.mark.parametrize("fix", ["persist", "external"])
def test_persistence_and_external_parameters_do_not(runs, fix):
    """Claim zero3-persistence-and-external-parameters-still-hang."""
    for rank in runs[fix]:
        assert not rank["finished"] and rank["step"] == hang.SKIP_STEP, rank


def test_the_description_names_rank_phase_and_collective(runs):
    lines = hang.describe(runs["none"]).splitlines()
    assert lines[0].startswith("rank 0: stopped ") and "in step 1's backward, waiting in reduce_scatter" in lines[0]
    assert lines[1].startswith("rank 1: stopped ") and "in step 1's forward, at `return self.l2(h)`" in lines[1]
    for line, rank in zip(lines, runs["none"]):
        assert ("stopped by its timeout" in line) == ("Timed out" in rank["error"]), line
    assert "finished 3 steps" in hang.describe(runs["mask"])


def test_fetching_nothing_ahead_pairs_the_all_gathers_wrongly_and_gloo_aborts():
    """Claim zero3-prefetch-0-pairs-all-gathers-in-order: rank 0's all-gather of l1 meets rank 1's of l2."""
    from zerolab.run import RunFailed

    with pytest.raises(RunFailed) as failure:
        hang.reproduce("prefetch0", timeout_s=30, progress=False)
    assert "Received data size doesn't match expected size" in failure.value.log_tail, failure.value.log_tail[-2000:]
    assert not ranks_left(), "a rank outlived its run"
