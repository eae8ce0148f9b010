"""CPU runs fork their ranks from one warm server per process (zerolab.run.warm_ranks): the ranks of later runs start
without importing torch and DeepSpeed again, measure what fresh processes measure, and leave no process but the
server. (The server's life, replacement and end with its kernel are zerolab.run.warm's, tested with lesson 08's
launcher in tests/test_rank_launcher.py.)"""
import psutil
import pytest

from leftovers import ranks_left
from zerolab.run import make_config, run, warm, warm_ranks

pytestmark = pytest.mark.slow


class Parents:
    """Progress callbacks that remember the parent of each process the run started (its warm servers aside)."""

    def __init__(self):
        self.ranks, self.before = {}, {child.pid for child in psutil.Process().children(recursive=True)}

    def look(self, *event):
        for child in psutil.Process().children(recursive=True):
            if child.pid not in self.before | warm.warm_pids():
                try:
                    self.ranks[child.pid] = child.ppid()
                except psutil.NoSuchProcess:
                    pass

    on_event = on_tick = look


def test_warm_and_fresh_ranks_train_and_measure_the_same(monkeypatch):
    config = make_config(stage=2, precision="bf16", accumulation=2)
    first, parents = run(config, ranks=2, steps=2, progress=False), Parents()
    server = warm.warm_pid(warm_ranks.SERVER)
    again = run(config, ranks=2, steps=2, progress=parents)
    assert server is not None and warm.warm_pid(warm_ranks.SERVER) == server, "the second run started a new server"
    assert len(parents.ranks) == 2 and set(parents.ranks.values()) == {server}, parents.ranks
    monkeypatch.setattr(warm_ranks, "start_rank", lambda *args: None)  # as where no warm server can be had
    fresh = run(config, ranks=2, steps=2, progress=False)
    for key in ("loss", "model_state_bytes", "measured_traffic", "micro_batch", "gradient_accumulation_steps"):
        assert [r.get(key) for r in first.ranks] == [r.get(key) for r in again.ranks] == \
            [r.get(key) for r in fresh.ranks], key
    assert ranks_left() == []
