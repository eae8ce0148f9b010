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
