"""Lesson 09's answer helpers. Sizes a learner may give as strings (exercise 1: "a number of bytes, or a string
with a unit"): every form the text allows is read as the bytes it says, zero included; a size without a unit, or a
negative one, is refused with the message that names the unit (issue 29: "0.0 MB", "6.6e-4 GiB" and "711168 bytes"
were refused). Exercise 5's test refuses ds_to_universal's process pool as the grading sandbox does."""
import pytest

from zerolab.ckpt.answers import as_bytes
from zerolab.engine.units import parse_bytes


@pytest.mark.parametrize("text, want", [
    ("0.0 MB", 0), ("0 B", 0), ("1.5 GB", 1_500_000_000), ("1.4GiB", round(1.4 * 2**30)),
    ("6.6e-4 GiB", round(6.6e-4 * 2**30)), ("711168 bytes", 711_168), ("1 byte", 1), ("2E3 KiB", 2_048_000),
    (".5 MiB", 2**19)])
def test_every_size_the_text_allows_is_read_as_its_bytes(text, want):
    assert as_bytes(text, "x") == want


@pytest.mark.parametrize("text", ["711168", "-1 MB", "1.5 GBs", "one GB", ""])
def test_a_size_without_its_unit_is_refused_naming_the_unit(text):
    with pytest.raises(AssertionError, match="wrong unit: x is the string"):
        as_bytes(text, "x")


def test_a_memory_size_on_the_command_line_is_still_more_than_zero():
    with pytest.raises(ValueError, match="is not a memory size"):
        parse_bytes("0 GB")
    assert parse_bytes("80GB") == 80 * 10**9 and parse_bytes("80 GiB") == 80 * 2**30


def test_lesson_09_exercise_5s_test_refuses_a_process_pool_as_the_grading_sandbox_does():
    """The sandbox's process cap makes ds_to_universal's pool fail there (PermissionError); the test cell's
    no_process_pool() makes it fail in Jupyter too, with a message naming the fix, and leaves one worker alone."""
    from deepspeed.checkpoint import ds_to_universal

    from zerolab.ckpt.answers import no_process_pool

    original = ds_to_universal.ProcessPoolExecutor
    with no_process_pool():
        assert ds_to_universal._do_parallel_work(lambda item: item * 2, [1, 2], 1) == [2, 4]
        with pytest.raises(AssertionError, match="num_extract_workers=1 and num_merge_workers=1"):
            ds_to_universal._do_parallel_work(lambda item: item * 2, [1, 2], 2)
    assert ds_to_universal.ProcessPoolExecutor is original
