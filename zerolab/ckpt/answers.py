"""Lesson 09's answer parsing and its multiple-choice key (kept out of the notebook, so no cell shows it)."""
from zerolab.checks import number
from zerolab.units import parse_bytes

LETTERS = "ABCD"

# Q: the error of load_state_dict on a ZeRO-3 model-states file; options in the order the lesson lists them
DIAGNOSIS_OPTIONS = (("world_size", "the checkpoint was saved on 2 ranks and is loaded into 1 process"),
                     ("truncated", "the file was cut short while it was being copied"),
                     ("placeholders", "ZeRO-3 partitions the parameters; the module in this file holds empty "
                                      "placeholders because the save did not gather them"),
                     ("dtype", "the weights were saved in bf16 and the model expects fp32"))
DIAGNOSIS_RIGHT = "placeholders"


def diagnosis_letter(option):
    """The letter under which the lesson lists ``option`` (an option id)."""
    return LETTERS[[option_id for option_id, _ in DIAGNOSIS_OPTIONS].index(option)]


def diagnosis_key():
    return diagnosis_letter(DIAGNOSIS_RIGHT)


def as_bytes(value, name="your answer"):
    """Bytes from an int or float (bytes) or a string with a unit ('1.2 GB', '1.1GiB'); AssertionError otherwise."""
    if type(value) is str:
        try:
            return parse_bytes(value)
        except ValueError:
            raise AssertionError(f"wrong unit: {name} is the string {value!r:.40}; write a number of bytes, or a "
                                 "string with a unit such as '1.5 GB' or '1.4 GiB'") from None
    return number(value, name, "bytes")
