"""Lesson 10's answer keys (zerolab.lesson.new_features): the options the lesson lists are the module's, and the
reasons exercise 5 gives for a wrong pick never name the right one."""
import re
from pathlib import Path

from zerolab.lesson import new_features

ROOT = Path(__file__).resolve().parent.parent
NAMES = {"deepcompile": "deepcompile", "zenflow": "zenflow", "superoffload": "superoffload", "autotp": "autotp",
         "ulysses": "ulysses", "zeropp": "zero++"}


def test_the_lessons_option_lists_are_the_modules():
    source = (ROOT / "autograder" / "src" / "10_zero_in_2026.py").read_text(encoding="utf-8")
    for question, options in new_features.OPTIONS.items():
        for letter, (_, text) in zip(new_features.LETTERS, options):
            assert f"# - {letter}: {text}" in source, (question, letter)


def test_a_wrong_picks_reason_names_only_the_picked_feature():
    for situation, right in new_features.PICKS.items():
        assert new_features.why_not(situation, right) is None
        limit = new_features.LIMIT[situation].lower()
        assert not any(name in limit for name in NAMES.values()), situation
        for feature in set(new_features.FEATURES) - {right}:
            changes, said_limit = new_features.why_not(situation, feature)
            assert said_limit == new_features.LIMIT[situation]
            named = {f for f, name in NAMES.items() if re.search(re.escape(name), changes.lower())}
            assert named == {feature}, (situation, feature, changes)


def test_the_keys_are_spread_over_the_letters():
    assert len({new_features.key(question) for question in new_features.OPTIONS}) == len(new_features.OPTIONS)
