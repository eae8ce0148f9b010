"""A build lock left by a killed DeepSpeed op build is removed; a fresh one (a build under way) is kept."""
import os
import time

from zerolab.run.op_locks import clear_stale_locks


def lock_at(root, op, age_s):
    folder = root / "py311_cpu" / op
    folder.mkdir(parents=True)
    lock = folder / "lock"
    lock.touch()
    then = time.time() - age_s
    os.utime(lock, (then, then))
    return lock


def test_an_old_lock_is_removed_and_a_fresh_one_kept(tmp_path):
    stale = lock_at(tmp_path, "cpu_adam", 3600)
    building = lock_at(tmp_path, "deepspeed_shm_comm", 5)
    assert clear_stale_locks(tmp_path, min_age_s=120, building=lambda: False) == [stale]
    assert not stale.exists() and building.exists()


def test_nothing_is_removed_while_a_build_runs(tmp_path):
    stale = lock_at(tmp_path, "cpu_adam", 3600)
    assert clear_stale_locks(tmp_path, min_age_s=120, building=lambda: True) == []
    assert stale.exists()


def test_a_missing_cache_is_nothing_to_do(tmp_path):
    assert clear_stale_locks(tmp_path / "absent") == []
