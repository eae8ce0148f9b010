"""The English and Chinese editions of a lesson, from one source.

In autograder/src/<name>.py every English markdown cell is followed at once by its Chinese counterpart:

    # %% [markdown]
    # ## What ZeRO-2 keeps on each GPU

    # %% [markdown] lang="zh" en="3f2a9c1d0b7e"
    # ## ZeRO-2 在每张 GPU 上保留什么

`en` is the first 12 hex digits of the SHA-256 of the English cell's text when the Chinese cell was last written,
so an English cell edited later shows up as stale. Code cells carry no language: both editions share them.

    python autograder/editions.py                  # every lesson: missing, stale and orphan Chinese cells
    python autograder/editions.py --stamp FILE...  # after updating the Chinese text: record the English hashes
"""
import argparse
import copy
import hashlib
import re
import sys
from pathlib import Path

import jupytext

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "autograder" / "src"
LANGUAGES = ("en", "zh")
HEADER = re.compile(r'^# %% \[markdown\] lang="zh" en="([0-9a-f]*)"\s*$', re.MULTILINE)


def english_hash(text):
    return hashlib.sha256(text.strip().encode()).hexdigest()[:12]


def is_chinese(cell):
    return cell.cell_type == "markdown" and cell.metadata.get("lang") == "zh"


def pairs(nb):
    """[(english cell, its Chinese cell or None)] for the markdown cells; orphans are Chinese cells with no English."""
    found, orphans = [], []
    for index, cell in enumerate(nb.cells):
        if is_chinese(cell):
            previous = nb.cells[index - 1] if index else None
            if previous is None or previous.cell_type != "markdown" or is_chinese(previous):
                orphans.append(index)
            continue
        if cell.cell_type == "markdown":
            following = nb.cells[index + 1] if index + 1 < len(nb.cells) else None
            found.append((cell, following if following is not None and is_chinese(following) else None))
    return found, orphans


def problems(nb, where):
    """One line per Chinese cell that is missing, stale (its English changed) or without an English cell."""
    found, orphans = pairs(nb)
    lines = [f"{where}: Chinese cell {index + 1} does not follow an English markdown cell" for index in orphans]
    for english, chinese in found:
        first = english.source.strip().splitlines()[0] if english.source.strip() else "(empty)"
        if chinese is None:
            lines.append(f"{where}: no Chinese cell after the English cell {first[:60]!r}")
        elif chinese.metadata.get("en") != english_hash(english.source):
            lines.append(f"{where}: the English cell {first[:60]!r} changed after its Chinese cell was written; "
                         f"update the Chinese text, then run `python autograder/editions.py --stamp {where}`")
    return lines


def edition(nb, language):
    """A copy of the lesson in one language: English drops the Chinese cells; Chinese puts each in place of its
    English."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {', '.join(LANGUAGES)}, not {language!r}")
    nb = copy.deepcopy(nb)
    cells = []
    for index, cell in enumerate(nb.cells):
        if is_chinese(cell):
            if language == "zh":
                cells[-1] = cell
            continue
        cells.append(cell)
    for cell in cells:
        for key in ("lang", "en"):
            cell.metadata.pop(key, None)
    nb.cells = cells
    return nb


def stamp(path):
    """Record, in each Chinese cell header of a source file, the hash of the English cell it follows."""
    text = path.read_text()
    found, _ = pairs(jupytext.reads(text, fmt="py:percent"))
    hashes = iter(english_hash(english.source) for english, chinese in found if chinese is not None)
    path.write_text(HEADER.sub(lambda match: f'# %% [markdown] lang="zh" en="{next(hashes, "")}"', text))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="*", type=Path, help="lesson sources (default: every autograder/src/*.py)")
    parser.add_argument("--stamp", action="store_true", help="record the English hashes in the Chinese cells")
    args = parser.parse_args(argv)
    files = args.files or sorted(path for path in SRC.glob("*.py") if not path.name.startswith("_"))
    if args.stamp:
        for path in files:
            stamp(path)
    lines = []
    for path in files:
        lines += problems(jupytext.read(path, fmt="py:percent"), path.relative_to(ROOT) if path.is_absolute() else path)
    print("\n".join(lines) or f"{len(files)} lesson source(s): every English cell has an up-to-date Chinese cell")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main())
