"""An exercise left as the release handed it out fails its test at once, with a message that says so, before the
test starts ranks or saves a checkpoint; an answered cell, in any shape, is never taken for the stub."""
import pytest

from zerolab.lesson.checks_source import off_limits
from zerolab.handmade.zero1 import grade
from zerolab.lesson.source import unanswered

STUBS = {
    "function": 'def consolidate(checkpoint_dir):\n    """doc"""\n    # YOUR CODE HERE\n    raise NotImplementedError()\n',
    "bare raise": "def consolidate(checkpoint_dir):\n    raise NotImplementedError\n",
    "code above the stub": "def consolidate(d):\n    x = load(d)\n    raise NotImplementedError()\n",
    "class with a stub __init__": ("class consolidate:\n    def __init__(self, p):\n        super().__init__(p)\n"
                                   "        raise NotImplementedError()\n\n    def step(self):\n        return 1\n"),
    "class body": "class consolidate:\n    def shards(self):\n        return []\n\n    raise NotImplementedError()\n",
}
ANSWERS = {
    "function": "def consolidate(checkpoint_dir):\n    return {}\n",
    "returns before a fallback": ("def consolidate(d):\n    if d:\n        return {}\n"
                                  "    raise NotImplementedError()\n"),
    "its own message": "def consolidate(d):\n    raise NotImplementedError('only ZeRO-3 folders')\n",
    "a class whose other method is unwritten": ("class consolidate:\n    def __init__(self):\n        self.x = 1\n\n"
                                                "    def step(self):\n        raise NotImplementedError()\n"),
    "assigned": "consolidate = dict\n",
    "a generator": "def consolidate(d):\n    yield d\n    raise NotImplementedError()\n",
}


@pytest.mark.parametrize("shape", STUBS)
def test_the_release_stub_is_found(shape):
    assert unanswered("consolidate", STUBS[shape])


@pytest.mark.parametrize("shape", ANSWERS)
def test_an_answer_is_never_taken_for_the_stub(shape):
    assert not unanswered("consolidate", ANSWERS[shape])


def test_a_later_cell_that_answers_wins():
    assert not unanswered("consolidate", "x = 1")
    history = [STUBS["function"], ANSWERS["function"]]
    off_limits("consolidate", ["zerolab.ckpt"], exercise="exercise 3", history=history, namespace={})


def test_both_gates_say_not_answered_yet_and_name_the_exercise():
    with pytest.raises(AssertionError, match=r"^not answered yet: consolidate still ends in raise "
                                             r"NotImplementedError\(\).*\(exercise 3\)"):
        off_limits("consolidate", ["zerolab.ckpt"], exercise="exercise 3", history=[STUBS["function"]], namespace={})
    with pytest.raises(AssertionError, match=r"^not answered yet: ShardedAdamW still ends"):
        grade.learner_cell("ShardedAdamW", cell=STUBS["class with a stub __init__"].replace("consolidate",
                                                                                             "ShardedAdamW"))
