"""zerolab.checks: what hidden tests accept as an answer."""
import pytest

from zerolab.checks import exact_type, plain


class AlwaysEqual:
    def __eq__(self, other):
        return True


class MyInt(int):
    pass


@pytest.mark.parametrize("value, message", [
    (AlwaysEqual(), "should be plain Python data"),
    (MyInt(3), "got test_checks.MyInt"),
    ({"a": [1, AlwaysEqual()]}, "your answer['a'][1]"),
    ({1: 2}, "should have str keys"),
    (float("nan"), "NaN or infinity"),
])
def test_plain_rejects_what_could_fake_a_match(value, message):
    with pytest.raises(AssertionError, match=message.replace("[", r"\[").replace("]", r"\]")):
        plain(value)


def test_plain_returns_fresh_json_data():
    value = {"a": (1, 2.5, None, True, "x")}
    assert plain(value) == {"a": [1, 2.5, None, True, "x"]}
    assert plain(value) is not value


def test_exact_type_rejects_subclasses():
    assert exact_type(3, int) == 3
    with pytest.raises(AssertionError, match="plain int, got bool"):
        exact_type(True, int)
    with pytest.raises(AssertionError, match="plain int or float, got MyInt"):
        exact_type(MyInt(1), (int, float))


# --- feedback helpers: the mistake class comes first, the expected value never appears ---------------------------
from zerolab.checks import choice, close_to, dict_keys, number, unit_slip, whole  # noqa: E402


@pytest.mark.parametrize("got, unit, message", [
    ("52 GB", "GB", "wrong type: Q should be a plain int or float"),
    (True, "GB", "wrong type"),
    (52e9, "GB", "wrong unit: Q looks like a number of bytes"),
    (52e9 / 2**30, "GB", "wrong unit: Q looks like a number of GiB"),
    (52e3, "GB", "wrong unit: Q looks like a number of MB"),
    (51.7, "GB", "rounding: Q is close but not within the accepted 0.1 %"),
    (26, "GB", "Q is not right: think"),
])
def test_close_to_names_the_mistake_class_first(got, unit, message):
    with pytest.raises(AssertionError) as caught:
        close_to(got, 52.0, "Q", 0.001, unit, hint="think")
    assert str(caught.value).startswith(message)
    assert "52.0" not in str(caught.value)


def test_close_to_accepts_within_tolerance_and_the_given_slips_are_named():
    assert close_to(52.04, 52.0, "Q", 0.001, "GB") == 52.04
    with pytest.raises(AssertionError, match="elements, not bytes"):
        close_to(13, 26.0, "Q", 1e-9, slips={0.5: "counted elements, not bytes"})


def test_unit_slip_is_exact_about_the_ratio():
    assert unit_slip(48.43, 52.0, "GB") == "GiB"
    assert unit_slip(55.8, 52.0, "GiB") == "GB"
    assert unit_slip(50.0, 52.0, "GB") is None


def test_number_whole_dict_keys_and_choice():
    assert number(3, "x") == 3
    with pytest.raises(AssertionError, match="wrong type: x should be an int .* float 26.0"):
        whole(26.0, "x")
    with pytest.raises(AssertionError, match="wrong type: x should be an int"):
        whole("26", "x")
    with pytest.raises(AssertionError, match="wrong case: d has the key 't4'"):
        dict_keys({"t4": 1, "A100": 2}, ["T4", "A100"], "d")
    with pytest.raises(AssertionError, match="missing key: d has no 'A100'"):
        dict_keys({"T4": 1}, ["T4", "A100"], "d")
    with pytest.raises(AssertionError, match="unexpected key: d has 'x'"):
        dict_keys({"T4": 1, "A100": 2, "x": 3}, ["T4", "A100"], "d")
    with pytest.raises(AssertionError, match="wrong type: d should be a dict"):
        dict_keys([1], ["T4"], "d")
    assert choice(" FP16 ", ["fp16", "bf16"]) == "fp16"
    with pytest.raises(AssertionError, match="wrong type: c should be a str"):
        choice(16, ["fp16", "bf16"], "c")


def test_dotted_path_normalises_what_carries_no_meaning():
    from zerolab.checks import dotted_path

    for text in (" zero_optimization.offload_param ", 'zero_optimization["offload_param"]', "zero_optimization/offload_param/",
                 "Zero_Optimization.Offload_Param"):
        assert dotted_path(text) == "zero_optimization.offload_param"
    with pytest.raises(AssertionError, match="wrong type: p should be a str"):
        dotted_path(["zero_optimization"], "p")
    with pytest.raises(AssertionError, match="is empty"):
        dotted_path(" . ", "p")


def test_path_in_names_an_incomplete_path():
    from zerolab.checks import path_in

    assert path_in("Zero_Optimization.Stage", {"zero_optimization.stage"}) == "zero_optimization.stage"
    with pytest.raises(AssertionError, match="incomplete path"):
        path_in("stage", {"zero_optimization.stage"})
    with pytest.raises(AssertionError, match="does not point at the problem: look"):
        path_in("fp16", {"zero_optimization.stage"}, hint="look")


def test_same_value_and_learner_value():
    from zerolab.checks import learner_value, same_value

    assert same_value(True, True, "x") is True
    with pytest.raises(AssertionError, match="wrong type: x should be a bool, got str 'true'"):
        same_value("true", True, "x")
    with pytest.raises(AssertionError, match="wrong type: x should be an int, got float"):
        same_value(2.0, 2, "x")
    with pytest.raises(AssertionError, match="wrong case: x is 'CPU'"):
        same_value("CPU", "cpu", "x")
    with pytest.raises(AssertionError, match="x is not right: h"):
        same_value("gpu", "cpu", "x", "h")

    def unfinished():
        raise NotImplementedError()
    assert learner_value(unfinished) is None and learner_value(len, "ab") == 2
