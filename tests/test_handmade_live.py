"""zerolab.handmade.core.live: every live tensor storage is found, once, wherever the learner keeps it."""
import torch

from zerolab.handmade.core import live


def test_moments_kept_as_attributes_of_the_parameters_are_found():
    model = torch.nn.Linear(40, 30)
    baseline = live.Baseline()
    for p in model.parameters():
        p.exp_avg = torch.zeros_like(p)  # a wrong ZeRO-1 hides its moments here, not in optimizer.state
    lines = live.breakdown(live.model_lines(model), exclude=baseline)
    assert lines["other"] == sum(p.numel() * p.element_size() for p in model.parameters())
    assert lines["parameters"] == 0  # the parameters existed before the baseline
    del baseline
    lines = live.breakdown(live.model_lines(model))
    assert lines["parameters"] == (40 * 30 + 30) * 4


def test_a_view_counts_its_whole_storage_and_a_storage_is_counted_once():
    baseline = live.Baseline()
    full = torch.zeros(1000)
    shards = [full[:10], full[10:20]]  # noqa: F841 (alive on purpose)
    assert live.live_bytes(exclude=baseline) == 4000
    del full
    assert live.live_bytes(exclude=baseline) == 4000  # the views keep the whole buffer alive
    del shards
    assert live.live_bytes(exclude=baseline) == 0


def test_a_tensor_in_a_closure_is_found_and_excluded_tensors_are_not():
    baseline = live.Baseline()
    hidden = torch.ones(256, dtype=torch.float64)
    mine = torch.ones(8)

    def keeper():
        return hidden

    assert live.live_bytes(exclude=[baseline, mine]) == 256 * 8
    assert keeper() is hidden


def test_storages_seen_in_a_collective_get_their_own_line(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        live.watch_collectives()
        live.watch_collectives()  # idempotent: wrapped once
        baseline = live.Baseline()
        live.forget_collectives()
        buffer = torch.zeros(500)
        dist.all_gather([buffer], torch.ones(500))  # the input is a temporary, freed after the call
        moments = torch.zeros(100)
        lines = live.breakdown({live.COMMUNICATION: live.communication_storages()}, exclude=[baseline])
        assert lines == {live.COMMUNICATION: 2000, "other": 400}
        assert moments.sum() == 0 and buffer.sum() == 500
    finally:
        dist.destroy_process_group()


def test_a_gradient_memory_sample_leaves_out_a_buffer_let_go_a_moment_later_and_counts_a_kept_one():
    """gloo's worker thread releases a collective's tensors just after the call returns; a sample taken then must
    not charge them to the learner, while a buffer the learner keeps is charged however long one waits."""
    import threading
    import time

    from zerolab.handmade.zero2.memory import GradientMemory

    model = torch.nn.Linear(8, 8)
    memory = GradientMemory(model.parameters())
    memory.active = True
    lingering = [torch.zeros(1000)]  # 4,000 bytes a worker thread holds for 10 ms more
    threading.Thread(target=lambda: (time.sleep(0.01), lingering.clear())).start()
    memory.sample("while a thread still holds a dropped buffer")
    assert memory.peak == 0, memory.peak
    kept = [torch.zeros(250)]  # noqa: F841 (1,000 bytes the learner keeps)
    memory.sample("with a kept buffer")
    assert (memory.peak, memory.where) == (1000, "in step 0, with a kept buffer")


def test_a_settled_breakdown_leaves_out_a_buffer_let_go_a_moment_later_and_counts_a_kept_one():
    """The same for the ZeRO-1 ranks' memory lines: a storage a thread drops 10 ms later is not charged; a kept
    one is, in every sample."""
    import threading
    import time

    baseline = live.Baseline()
    # 4,000 bytes a worker thread drops 10 ms after the first sample has seen them (a sleep before the drop alone
    # was outrun by a loaded machine, whose first sample came after it)
    lingering = [torch.zeros(1000)]
    kept = [torch.zeros(250)]  # noqa: F841 (1,000 bytes the learner keeps)
    seen = threading.Event()
    threading.Thread(target=lambda: (seen.wait(), time.sleep(0.01), lingering.clear())).start()
    assert live.breakdown(exclude=[baseline])[live.OTHER] == 5000  # one sample: the dropped buffer too
    seen.set()
    assert live.settled_breakdown(exclude=[baseline], settle=3.0)[live.OTHER] == 1000
