"""The claim register (autograder/claims.py): every claim a lesson marks is registered with a sentence, a library
and a check that is a test of this suite, in both editions, and docs/claims.md is fresh. The checks themselves run
as the tests they name."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "autograder"))
import claims  # noqa: E402


def test_every_marked_claim_is_registered_and_checked_in_both_editions():
    assert claims.register(), "no claim registered"
    assert claims.problems() == []


def test_the_page_of_claims_is_fresh():
    assert (ROOT / "docs" / "claims.md").read_text() == claims.page(), "run python autograder/claims.py"


def test_a_missing_check_an_unregistered_mark_and_a_lone_edition_are_reported(monkeypatch):
    entries = [dict(claim) for claim in claims.register()]
    entries[0]["check"] = "tests/test_claims.py::no_such_test"
    monkeypatch.setattr(claims, "register", lambda: entries[:1])
    marked = claims.marks()
    first = entries[0]["id"]
    marked[first] = [place for place in marked[first] if place[2] == "en"]
    monkeypatch.setattr(claims, "marks", lambda: marked)
    found = claims.problems()
    assert any("no_such_test is not a test function" in problem for problem in found)
    assert any("marked in the en edition(s)" in problem for problem in found)
    assert any("but not in autograder/claims/" in problem for problem in found)
    assert any("checks no registered claim" in problem for problem in found), "the other claims' checks are orphans now"
