"""zerolab.lesson.checks: what hidden tests accept as an answer."""
import pytest

from zerolab.lesson.checks import exact_type, plain


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
from zerolab.lesson.checks import choice, close_to, dict_keys, number, unit_slip, whole  # noqa: E402


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
    from zerolab.lesson.checks import dotted_path

    for text in (" zero_optimization.offload_param ", 'zero_optimization["offload_param"]', "zero_optimization/offload_param/",
                 "Zero_Optimization.Offload_Param"):
        assert dotted_path(text) == "zero_optimization.offload_param"
    with pytest.raises(AssertionError, match="wrong type: p should be a str"):
        dotted_path(["zero_optimization"], "p")
    with pytest.raises(AssertionError, match="is empty"):
        dotted_path(" . ", "p")


def test_path_in_names_an_incomplete_path():
    from zerolab.lesson.checks import path_in

    assert path_in("Zero_Optimization.Stage", {"zero_optimization.stage"}) == "zero_optimization.stage"
    with pytest.raises(AssertionError, match="incomplete path"):
        path_in("stage", {"zero_optimization.stage"})
    with pytest.raises(AssertionError, match="does not point at the problem: look"):
        path_in("fp16", {"zero_optimization.stage"}, hint="look")


def test_same_value_and_learner_value():
    from zerolab.lesson.checks import learner_value, same_value

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


# --- off-limits functions: an exercise that asks for a formula cannot be answered by the function it is graded by ---
import zerolab.engine.comm  # noqa: E402
import zerolab.engine.memory  # noqa: E402
from zerolab.lesson import checks_source  # noqa: E402

_ESTIMATE = ["zerolab.engine.memory.estimate"]
_NOTEBOOK = {"memory": zerolab.engine.memory, "comm": zerolab.engine.comm, "__name__": "__main__"}


def _uses(cell, forbidden=_ESTIMATE, allowed=(), namespace=None, earlier=(), history=None):
    """What the cell defining f uses of ``forbidden``, after running it as a notebook would."""
    namespace = dict(_NOTEBOOK if namespace is None else namespace)
    for source in (history or []) + [cell]:
        exec(compile(source, "<cell>", "exec"), namespace)
    return checks_source.used_off_limits("f", forbidden, allowed, earlier, (history or []) + [cell], namespace)


@pytest.mark.parametrize("cell", [
    "def f(p):\n    return memory.estimate(p, 0).gpu_bytes\n",
    "from zerolab.engine import memory as m\ndef f(p):\n    return m.estimate(p, 0).gpu_bytes\n",
    "from zerolab.engine.memory import estimate as guess\ndef f(p):\n    return guess(p, 0).gpu_bytes\n",
    "import zerolab.engine.memory\ndef f(p):\n    return zerolab.engine.memory.estimate(p, 0).gpu_bytes\n",
    "import zerolab\ndef f(p):\n    return zerolab.engine.memory.estimate(p, 0).gpu_bytes\n",
    "def f(p):\n    return getattr(memory, 'estimate')(p, 0).gpu_bytes\n",
    "def f(p):\n    return getattr(memory, 'esti' + 'mate')(p, 0).gpu_bytes if False else vars(memory)['estimate'](p, 0)\n",
    "import importlib\ndef f(p):\n    return importlib.import_module('zerolab.engine.memory').estimate(p, 0).gpu_bytes\n",
    "def f(p):\n    m = __import__('zerolab.engine.memory', fromlist=['x'])\n    return m.estimate(p, 0).gpu_bytes\n",
    "def f(p):\n    mod = memory\n    fn = mod.estimate\n    return fn(p, 0).gpu_bytes\n",
    "from zerolab.engine.memory import *\ndef f(p):\n    return 16 * p\n",
    "def f(p):\n    return memory.__dict__['estimate'](p, 0).gpu_bytes\n",
])
def test_off_limits_sees_through_renames_and_indirection(cell):
    assert _uses(cell) == "zerolab.engine.memory.estimate"


def test_off_limits_follows_the_notebook_functions_the_cell_calls():
    helper = "def helper(p):\n    return memory.estimate(p, 0).gpu_bytes\n"
    assert _uses("def f(p):\n    return helper(p)\n", history=[helper]) == "zerolab.engine.memory.estimate"
    est = "est = memory.estimate\n"
    assert _uses("def f(p):\n    return est(p, 0).gpu_bytes\n", history=[est]) == "zerolab.engine.memory.estimate"
    # an earlier exercise's function is graded on its own: not followed
    earlier = "def g(p):\n    return memory.estimate(p, 0).gpu_bytes\n"
    assert _uses("def f(p):\n    return g(p)\n", history=[earlier], earlier=["g"]) is None


def test_off_limits_lets_through_what_the_lesson_offers_and_honest_code():
    assert _uses("def f(p):\n    return 16 * p\n") is None
    assert _uses("def f(p):\n    estimate = 16 * p\n    return memory.DEFAULT_BUFFER_FACTOR * estimate\n") is None
    traffic = ["zerolab.engine.comm.transfer_time"]
    offered = "def f(p):\n    t = comm.traffic(p, 2, 8)\n    return t.wire_bytes / comm.bandwidth('pcie4')\n"
    assert _uses(offered, traffic, ["zerolab.engine.comm.traffic", "zerolab.engine.comm.bandwidth"]) is None
    assert _uses(offered.replace("t.wire_bytes / comm.bandwidth('pcie4')", "comm.transfer_time(t.wire_bytes, 'pcie4')"),
                 traffic, ["zerolab.engine.comm.traffic"]) == "zerolab.engine.comm.transfer_time"
    # a whole module off limits, one name in it allowed
    assert _uses("def f(p):\n    return comm.bandwidth('pcie4')\n", ["zerolab.engine.comm"], ["zerolab.engine.comm.bandwidth"]) is None
    assert _uses("def f(p):\n    return comm.traffic(p, 0, 8)\n", ["zerolab.engine.comm"], ["zerolab.engine.comm.bandwidth"]) == "zerolab.engine.comm"


def test_off_limits_names_the_notebooks_own_functions_and_what_to_write_instead():
    mine = "def optimizer_bytes(p):\n    return 12 * p\n"
    assert _uses("def f(p):\n    return optimizer_bytes(p) + 4 * p\n", ["optimizer_bytes"], history=[mine]) == \
        "optimizer_bytes"
    assert _uses("def f(p):\n    return globals()['optimizer_bytes'](p)\n", ["optimizer_bytes"], history=[mine]) == \
        "optimizer_bytes"
    cell = "def f(p):\n    return memory.estimate(p, 0).gpu_bytes\n"
    namespace = dict(_NOTEBOOK)
    exec(cell, namespace)
    with pytest.raises(AssertionError) as caught:
        checks_source.off_limits("f", _ESTIMATE, exercise="exercise 1", instead="add up the bytes yourself",
                                 history=[cell], namespace=namespace)
    assert str(caught.value) == ("off limits: exercise 1 asks you to work it out, so the cell that defines f may not "
                                 "use zerolab.engine.memory.estimate; add up the bytes yourself")
    with pytest.raises(AssertionError, match="no executed cell defines f"):
        checks_source.off_limits("f", _ESTIMATE, history=[], namespace=namespace)


def test_close_to_names_time_units_and_bits():
    with pytest.raises(AssertionError, match="wrong unit: t looks like a number of milliseconds; give it in seconds"):
        close_to(2500.0, 2.5, "t", 1e-6, "seconds")
    with pytest.raises(AssertionError, match="wrong unit: t is off by a factor of 8, bits where bytes belong"):
        close_to(20.0, 2.5, "t", 1e-6, "seconds", bits=True)
    with pytest.raises(AssertionError, match="t is not right"):
        close_to(20.0, 2.5, "t", 1e-6, "seconds")  # bits only where the exercise asks for them
    assert unit_slip(2.5 / 60, 2.5, "seconds") == "minutes"


# --- a later exercise is graded with the reference earlier function --------------------------------------------
from zerolab.lesson.checks_cascade import agrees, with_reference  # noqa: E402


def test_with_reference_grades_the_later_exercise_alone_and_says_why(capsys):
    namespace = {}
    exec("def double(x):\n    return 3 * x\n"
         "def later(x):\n    return double(x) + 1\n", namespace)
    earlier = with_reference("double", lambda x: 2 * x, "exercise 1", "exercise 2", namespace=namespace)
    assert namespace["later"](5) == 11  # the reference's 10, plus the later exercise's own logic
    earlier.note()
    earlier.note()
    out = capsys.readouterr().out
    assert out.count("note:") == 1 and "your double from exercise 1 gives 15 for double(5)" in out
    assert "10" not in out and "exercise 2 is graded with the course's double" in out
    earlier.restore()
    assert namespace["later"](5) == 16


def test_with_reference_says_nothing_when_the_earlier_answer_is_right_and_covers_a_missing_one(capsys):
    namespace = {"double": lambda x: 2.0 * x + 1e-9}
    earlier = with_reference("double", lambda x: 2 * x, "exercise 1", "exercise 2", namespace=namespace)
    assert namespace["double"](4) == 8 + 1e-9  # the learner's own value: it agrees
    earlier.note()
    assert capsys.readouterr().out == ""
    missing = {}
    earlier = with_reference("double", lambda x: 2 * x, "exercise 1", "exercise 2", namespace=missing)
    assert missing["double"](1) == 2
    earlier.note()
    assert "gives nothing (it is not defined)" in capsys.readouterr().out
    earlier.restore()
    assert "double" not in missing


def test_a_right_earlier_answer_is_used_as_it_is_so_the_later_one_is_graded_on_its_own_values():
    """Issue 29: the course's reference rounds each term to whole bytes, so per_gpu_bytes(1, 3, 8) is 1 there and 2 in
    exact arithmetic; a right fraction_kept built on one parameter must see the learner's own 2."""
    from zerolab.engine import memory

    namespace = {}
    exec("def per_gpu_bytes(params, stage, gpus):\n"
         "    return 2 * params / (gpus if stage >= 3 else 1) + 2 * params / (gpus if stage >= 2 else 1)"
         " + 12 * params / (gpus if stage >= 1 else 1)\n"
         "def fraction_kept(stage, gpus):\n    return per_gpu_bytes(1, stage, gpus) / per_gpu_bytes(1, 0, gpus)\n",
         namespace)
    assert memory.estimate(1, 3, gpus_per_node=8).gpu_bytes == 1  # why the rounded figure cannot be the reference
    for reference, tolerance in (
            (lambda p, s, g: memory.estimate(p, s, gpus_per_node=g).gpu_bytes, 2),  # agreeing within 2 bytes
            (lambda p, s, g: memory.estimate(p, s, gpus_per_node=g, whole_bytes=False).gpu_bytes, 1e-6)):  # exact
        earlier = with_reference("per_gpu_bytes", reference, "exercise 2", "exercise 3", namespace=namespace,
                                 abs_tol=tolerance)
        assert namespace["fraction_kept"](3, 8) == 1 / 8 and namespace["fraction_kept"](1, 4) == (2 + 2 + 3) / 16
        assert earlier.differences == []
        earlier.restore()


def test_an_agreeing_answer_goes_on_as_plain_numbers():
    class Rigged(float):
        def __truediv__(self, other):
            return 0.125

    namespace = {"bytes_of": lambda n: {"gpu": Rigged(16.0 * n), "parts": [Rigged(2.0 * n)]}}
    with_reference("bytes_of", lambda n: {"gpu": 16 * n, "parts": [2 * n]}, "exercise 1", "exercise 2",
                   namespace=namespace)
    got = namespace["bytes_of"](3)
    assert got == {"gpu": 48, "parts": [6]} and type(got["gpu"]) is int and type(got["parts"][0]) is int
    half = namespace["bytes_of"](0.5)["gpu"]
    assert half == 8 and type(half) is float  # the reference's own type


def test_agrees_compares_dicts_and_numbers_with_tolerance():
    assert agrees({"a": 1.0000001, "b": [2, 3]}, {"a": 1, "b": [2, 3]})
    assert not agrees({"a": 1}, {"a": 1, "b": 2}) and not agrees("1", 1) and not agrees(True, 1)


def test_off_limits_does_not_mistake_the_cells_own_names_for_the_notebooks():
    import zerolab.sizing.fit

    namespace = dict(_NOTEBOOK, fit=zerolab.sizing.fit.fit, optimizer_bytes=lambda p: 12 * p)
    cell = ("def f(p, estimate=None):\n    fit = p < 10\n    optimizer_bytes = 12 * p\n"
            "    return fit and optimizer_bytes\n")
    assert _uses(cell, ["zerolab.sizing.fit", "optimizer_bytes"], namespace=namespace) is None
    assert _uses("def f(p):\n    return fit(p)\n", ["zerolab.sizing.fit"], namespace=namespace) == "zerolab.sizing.fit"
