"""A keyed multiple-choice question set: options listed in the lesson's order under letters A-D, and the right one.

Lesson 07 (zerolab.lesson.drill) and lesson 10 (zerolab.lesson.new_features) hold their options and keys in the
package, so a test cell takes the key from here rather than from a letter typed into it.
"""
LETTERS = "ABCD"


class Keyed:
    def __init__(self, options, right):
        self.options, self.right = options, right  # question -> ((option id, text), ...); question -> option id

    def letter(self, question, option):
        """The letter under which the lesson lists ``option`` (an option id) of ``question``."""
        return LETTERS[[option_id for option_id, _ in self.options[question]].index(option)]

    def key(self, question):
        """The right letter of ``question``."""
        return self.letter(question, self.right[question])

    def is_right(self, question, answer):
        """Whether ``answer`` (a letter, as zerolab.lesson.checks.choice returns it) is the right one."""
        return answer == self.key(question)
