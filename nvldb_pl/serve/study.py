"""What a study asks of its settings and exports, apart from the page's learning: annotator names, the completion
code and link, attention pairs, the consent text, and CSV cells a spreadsheet cannot misread. Each check refuses in
one line naming its flag (a ValueError)."""

from __future__ import annotations

import re
from typing import Optional

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a CSV cell a spreadsheet would read as a formula
# control characters (NUL ...) and the marks that turn text's direction (a cell that reads other than it is)
UNPRINTABLE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def csv_cell(value) -> str:
    """A text cell of an export, neutralized: control characters and direction marks left out, and one that a
    spreadsheet would run as a formula gets a leading '."""
    text = UNPRINTABLE.sub("", "" if value is None else str(value))
    return "'" + text if text.startswith(FORMULA_START) else text


def clip(value) -> str:
    """A value as a refusal may quote it: its repr, cut to 40 characters (never the whole of a huge one)."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def is_name(name) -> bool:
    """An annotator's name: 1 to 100 printable characters (no control character or direction mark)."""
    return isinstance(name, str) and 0 < len(name.strip()) <= 100 and not UNPRINTABLE.search(name)


def check_name(name, field: str) -> None:
    """:func:`is_name`, or a ValueError naming ``field``."""
    if not is_name(name):
        raise ValueError(f"{field}: a name of 1 to 100 printable characters, got {clip(name)}")


COMPLETION_CODE = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_completion(code: Optional[str], url: Optional[str], goal: Optional[int]) -> Optional[dict]:
    """The study's completion ``{"code", "url"}`` (None: none), refused naming the flag: a code not 1 to 64 letters,
    digits, ``_`` or ``-``; a link not http(s); either without a goal (nobody would reach it)."""
    if code is None and url is None:
        return None
    if goal is None:
        raise ValueError(
            "--completion-code/--completion-url: given at the end of the questions; give --questions-per-person"
        )
    if code is not None and not (isinstance(code, str) and COMPLETION_CODE.fullmatch(code)):
        raise ValueError(f"--completion-code: 1 to 64 letters, digits, _ or -, got {clip(code)}")
    if url is not None and not (isinstance(url, str) and re.fullmatch(r"https?://[^\s\x00-\x1f\x7f]{1,2000}", url)):
        raise ValueError(f"--completion-url: an http(s):// link, got {clip(url)}")
    return {"code": code, "url": url}


def check_attention(pairs, every, names: list) -> tuple[list, Optional[int]]:
    """``--attention`` pairs ``"BETTER>WORSE"`` as item indices, and ``--attention-every`` (default 10 with pairs)."""
    if not pairs:
        if every is not None:
            raise ValueError("--attention-every: asks the pairs of --attention; give them")
        return [], None
    index = {n: k for k, n in enumerate(names)}
    out = []
    for pair in pairs:
        a, sep, b = str(pair).partition(">")
        a, b = a.strip(), b.strip()
        if not sep or a not in index or b not in index or a == b:
            raise ValueError(
                f"--attention: {clip(pair)} is not BETTER>WORSE of two items of the catalog (as its name column has them)"
            )
        out.append((index[a], index[b]))
    every = 10 if every is None else every
    if type(every) is not int or every < 2:
        raise ValueError(f"--attention-every: an integer >= 2, got {clip(every)}")
    return out, every


def check_consent(text: Optional[str]) -> Optional[str]:
    """A study's consent text: 1 to 20000 characters, no control character (but line ends) or direction mark."""
    if text is None:
        return None
    if not (isinstance(text, str) and 0 < len(text.strip()) <= 20000 and not UNPRINTABLE.search(text)):
        raise ValueError("--consent: a text of 1 to 20000 printable characters (line ends allowed)")
    return text.strip()
