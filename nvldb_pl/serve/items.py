"""The items people compare: names, what the page shows of them, and the contexts the learner sees.

An items file is a CSV (comma-, semicolon- or tab-separated) with a header row: a ``name`` column,
optional ``text`` and ``image`` columns (a description and an image: shown to people, never
learned from), and every other column a numeric feature. An image is a URL (``http(s)://``, ``data:image/``) or a
file beside the CSV (a path relative to its folder, inside it: PNG, JPEG, GIF or WebP), which the page serves at
``/images/<item index>``; its bytes are part of the catalog's sha256. The contexts are the features standardized
over the items, each item then scaled to unit norm, as ``scripts/duel.py`` does with its catalog.
"""

from __future__ import annotations

import csv
import hashlib
import math
import os
import re
import unicodedata
from dataclasses import dataclass

import numpy as np

SHOWN = ("text", "image")  # columns shown, not learned from
IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
IMAGE_URL = re.compile(r"(https?://|data:image/)", re.I)
FEATURES = ("sweetness", "acidity", "body", "bitterness", "price")  # the built-in catalog's
NAMES = (
    "Aurora",
    "Basalt",
    "Cinder",
    "Delta",
    "Ember",
    "Fjord",
    "Granite",
    "Harbor",
    "Indigo",
    "Juniper",
    "Kestrel",
    "Lumen",
)


@dataclass(frozen=True)
class Catalog:
    """N items: ``names`` [N], ``text`` and ``image`` [N] (or None), ``features`` their names [d],
    ``raw`` the file's values [N, d], ``contexts`` [N, d] (standardized, unit norm), ``source``, ``sha256``."""

    names: list
    text: list | None
    image: list | None
    features: list
    raw: np.ndarray
    contexts: np.ndarray
    source: str
    sha256: str
    image_files: tuple | None = None  # [N]: the local image file of each item (None: a URL or no image)

    def describe(self, k: int) -> str:
        """One line: the item's name and its feature values."""
        return f"{self.names[k]:<8s} " + "  ".join(f"{f} {v:g}" for f, v in zip(self.features, self.raw[k]))


def contexts_of(raw: np.ndarray, features, where: str) -> np.ndarray:
    """raw [N, d] standardized over the items, each row scaled to unit norm; refused naming the column: a constant
    one, and one whose mean or spread overflows float64 (a cell of 1e308: it zeroed the column)."""
    with np.errstate(over="ignore", invalid="ignore"):
        mean, std = raw.mean(0), raw.std(0)
        z = (raw - mean) / std
    for k, (f, s, m) in enumerate(zip(features, std, mean)):
        if np.isfinite(m) and np.isfinite(s) and s <= 1e-12 * max(1.0, abs(m)):
            raise ValueError(f"{where}: column {f!r} has the same value for every item; it tells no two apart")
        if not (np.isfinite(m) and np.isfinite(s) and np.isfinite(z[:, k]).all()):
            r = int(np.argmax(np.abs(raw[:, k])))
            raise ValueError(
                f"{where}: column {f!r}: its values (up to {raw[r, k]:.3g}, item {r + 1}) overflow float64 when "
                f"standardized (mean 0, sd 1); rescale the column (e.g. to other units)"
            )
    norm = np.linalg.norm(z, axis=1, keepdims=True)
    if (norm == 0).any():
        k = int(np.argwhere(norm[:, 0] == 0)[0][0])
        raise ValueError(f"{where}: item {k + 1} has every feature at the items' mean; it has no direction to learn")
    return z / norm


def builtin_catalog(seed: int = 2026) -> Catalog:
    """The 12 made-up items of ``scripts/duel.py``: 5 features in [0, 1] with one decimal."""
    raw = np.round(np.random.default_rng(seed).uniform(0, 1, (len(NAMES), len(FEATURES))), 1)
    digest = hashlib.sha256(f"builtin:{seed}:{raw.tobytes().hex()}".encode()).hexdigest()
    return Catalog(
        list(NAMES), None, None, list(FEATURES), raw, contexts_of(raw, FEATURES, "catalog"), "built-in", digest
    )


def read_items(path: str) -> Catalog:
    """The items of ``path`` (see the module's docstring). Refused, naming the line and column: a missing
    ``name`` column or name, a repeated name, a ragged row, a non-numeric or non-finite feature, fewer than
    two items or no feature."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
        text = data.decode("utf-8-sig")
    except IsADirectoryError:
        raise ValueError(f"--items: {path} is a folder; give a CSV file") from None
    except FileNotFoundError:
        raise FileNotFoundError(f"--items: {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"--items: {path} cannot be read as UTF-8 text ({err})") from None
    lines = text.splitlines()
    first = next((line for line in lines if line.strip()), "")
    delimiter = next((d for d in (",", ";", "\t") if d in first), ",")
    reader = csv.reader(lines, delimiter=delimiter)
    try:
        rows = [(n, [c.strip() for c in r]) for n, r in enumerate(reader, 1) if any(c.strip() for c in r)]
    except csv.Error as err:  # a cell past the csv module's field limit, a NUL byte
        limit = csv.field_size_limit()
        what = f"a cell of more than {limit} characters" if "field limit" in str(err) else f"not a CSV row ({err})"
        raise ValueError(f"{path}, line {reader.line_num}: {what}; is a quote left open?") from None
    if not rows:
        raise ValueError(f"{path}: empty; expected a header row with a 'name' column, then one row an item")
    header_line, header = rows[0]
    lower = [h.lower() for h in header]
    if "name" not in lower:
        raise ValueError(f"{path}, line {header_line}: no 'name' column in the header {header}")
    for h in set(lower):
        if lower.count(h) > 1:
            raise ValueError(f"{path}, line {header_line}: column {h!r} appears twice")
    col = {h: lower.index(h) for h in ("name", *SHOWN) if h in lower}
    features = [i for i in range(len(header)) if lower[i] not in col]
    if not features:
        raise ValueError(
            f"{path}: no feature column; every column but name, text and image is a number the learner sees"
        )
    names, raw, shown, looks = [], [], {h: [] for h in SHOWN if h in col}, {}
    for n, cells in rows[1:]:
        if len(cells) != len(header):
            raise ValueError(f"{path}, line {n}: expected {len(header)} columns, found {len(cells)}")
        name = cells[col["name"]]
        if not _looks(name).strip():
            raise ValueError(f"{path}, line {n}, column 'name': empty")
        if name in names:
            raise ValueError(f"{path}, line {n}, column 'name': {name!r} is already the name of another item")
        if _looks(name) in looks:  # shown alike: people could not tell the two items apart
            m, other = looks[_looks(name)]
            raise ValueError(
                f"{path}, line {n}, column 'name': {name!r} looks like line {m}'s {other!r} (the same text in another "
                f"Unicode spelling, or with an invisible character); give each item a name of its own"
            )
        looks[_looks(name)] = (n, name)
        values = []
        for i in features:
            try:
                v = float(cells[i])
            except ValueError:
                raise ValueError(f"{path}, line {n}, column {header[i]!r}: not a number: {cells[i]!r}") from None
            if not math.isfinite(v):
                raise ValueError(f"{path}, line {n}, column {header[i]!r}: not finite: {cells[i]!r}")
            values.append(v)
        names.append(name)
        raw.append(values)
        for h in shown:
            shown[h].append(cells[col[h]])
    if len(names) < 2:
        raise ValueError(f"{path}: {len(names)} item(s); a question needs two")
    feats = [header[i] for i in features]
    raw = np.asarray(raw, dtype=np.float64)
    digest = hashlib.sha256(data)
    image = shown.get("image")
    files = None if image is None else tuple(_image_file(path, n, cell) for (n, _), cell in zip(rows[1:], image))
    for k, f in enumerate(files or ()):
        if f is not None:  # shown from this server; what it shows is part of the catalog
            image[k] = f"/images/{k}"
            with open(f, "rb") as fh:
                digest.update(hashlib.sha256(fh.read()).digest())
    if files is not None and not any(files):
        files = None  # URLs only
    return Catalog(
        names,
        shown.get("text"),
        image,
        feats,
        raw,
        contexts_of(raw, feats, str(path)),
        str(path),
        digest.hexdigest(),
        files,
    )


def _looks(name: str) -> str:
    """A name as people see it: Unicode NFC (one spelling of an accented letter) without its invisible format
    characters (zero-width spaces and joiners, a byte order mark)."""
    return "".join(c for c in unicodedata.normalize("NFC", name) if unicodedata.category(c) != "Cf")


def _image_file(path: str, line: int, cell: str) -> str | None:
    """The image file ``cell`` names (relative to the CSV's folder, inside it), or None for a URL or no image."""
    if not cell or IMAGE_URL.match(cell):
        return None
    where = f"{path}, line {line}, column 'image'"
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    target = os.path.realpath(os.path.join(folder, cell))
    if os.path.isabs(cell) or os.path.commonpath([folder, target]) != folder:
        raise ValueError(f"{where}: {cell!r} is outside the items file's folder; give a path inside it or a URL")
    kind = os.path.splitext(target)[1].lower()
    if kind not in IMAGE_TYPES:
        raise ValueError(f"{where}: {cell!r} is not one of {sorted(IMAGE_TYPES)} (a URL starts with https://)")
    if not os.path.isfile(target):
        raise FileNotFoundError(f"{where}: {cell!r}: no such file beside {path}")
    return target


def kendall_tau(a, b) -> float:
    """Kendall's tau-a between two score vectors [N] (a pair tied in either counts 0)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    n = len(a)
    if n < 2:
        return 1.0
    s = np.sign(a[:, None] - a[None, :]) * np.sign(b[:, None] - b[None, :])
    return float(np.triu(s, 1).sum() / (n * (n - 1) / 2))
