"""UCI classification data as dueling tasks (appendix "Real-World Dataset"): readers and encoding.

Datasets (files as UCI ships them; see ``../shared/data/uci/README.md``):

* ``statlog``   Statlog (Shuttle): ``shuttle/shuttle.trn`` + ``shuttle/shuttle.tst``, 9 features,
  whitespace-separated, label 1..7 in the last column (7 arms).
* ``magic``     MAGIC Gamma Telescope: ``magic/magic04.data``, 10 features, comma-separated, label
  ``g``/``h`` (2 arms).
* ``covertype`` Covertype: ``covtype/covtype_odmgm_20k.data`` (or UCI's full ``covtype.data.gz``),
  54 features, comma-separated, label 1..7 (7 arms).

A ``.gz`` twin of any file is read when the plain file is absent. Features are standardized on
the data (zero-variance columns stay 0). The context of arm k for instance x is the disjoint
(block) encoding: x in block k of a K*p vector, normalized to unit norm; u_k = 1 if k = y.

``data.task: table`` reads a user's own CSV the same way (:func:`read_user_table`: with or without a
header, the label and feature columns chosen in the config).
"""

from __future__ import annotations

import gzip
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import numpy as np

UCI_TASKS = ("statlog", "magic", "covertype")


@dataclass(frozen=True)
class UCISpec:
    files: tuple[tuple[str, ...], ...]  # per part, candidate paths relative to the data dir
    features: int
    labels: tuple[str, ...]  # label strings in arm order


SPECS = {
    "statlog": UCISpec((("shuttle/shuttle.trn",), ("shuttle/shuttle.tst",)), 9, tuple("1234567")),
    "magic": UCISpec((("magic/magic04.data",),), 10, ("g", "h")),
    "covertype": UCISpec((("covtype/covtype_odmgm_20k.data", "covtype/covtype.data"),), 54, tuple("1234567")),
}


def default_data_dir() -> str:
    """``$NVLDB_UCI_DIR`` if set, else ``../shared/data/uci`` next to the repository."""
    env = os.environ.get("NVLDB_UCI_DIR")
    if env:
        return env
    return str(Path(__file__).resolve().parents[2].parent / "shared" / "data" / "uci")  # <repo>/../shared


def _open(path: str):
    """A text table, utf-8 with or without a byte order mark (Excel's "CSV UTF-8" writes one)."""
    return gzip.open(path, "rt", encoding="utf-8-sig") if path.endswith(".gz") else open(path, encoding="utf-8-sig")


def _resolve(data_dir: str, candidates: tuple[str, ...]) -> str:
    for rel in candidates:
        for path in (os.path.join(data_dir, rel), os.path.join(data_dir, rel) + ".gz"):
            if os.path.isfile(path):
                return path
    tried = ", ".join(os.path.join(data_dir, c) + "[.gz]" for c in candidates)
    raise FileNotFoundError(f"data.data_dir: no data file found; looked for {tried}")


def read_table(path: str, features: int, labels: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Rows ``f_1 .. f_p label`` (comma- or whitespace-separated) -> X [n, p] float64, y [n] in 0..K-1.

    Raises ValueError naming the file and line for a wrong column count, a non-numeric cell or
    an unknown label, and for an empty file.
    """
    index = {label: k for k, label in enumerate(labels)}
    X, y = [], []
    try:
        with _open(path) as fh:
            for n, line in enumerate(fh, start=1):
                line = line.strip()
                if not line:
                    continue
                cells = line.split(",") if "," in line else line.split()
                if len(cells) != features + 1:
                    raise ValueError(
                        f"{path}, line {n}: expected {features + 1} columns "
                        f"({features} features and a label), found {len(cells)}"
                    )
                try:
                    X.append([float(c) for c in cells[:-1]])
                except ValueError:
                    bad = next(i for i, c in enumerate(cells[:-1]) if not _is_number(c))
                    raise ValueError(f"{path}, line {n}, column {bad + 1}: non-numeric value {cells[bad]!r}") from None
                label = cells[-1].strip()
                if label not in index:
                    raise ValueError(f"{path}, line {n}: unknown label {label!r}; expected one of {list(labels)}")
                y.append(index[label])
    except (OSError, EOFError, UnicodeDecodeError) as err:  # unreadable, truncated gzip, binary junk
        raise ValueError(f"{path}: cannot be read as a text table ({err})") from None
    if not X:
        raise ValueError(f"{path}: no data rows")
    X = np.asarray(X, dtype=np.float64)
    if not np.isfinite(X).all():
        r = int(np.argwhere(~np.isfinite(X))[0][0])
        raise ValueError(f"{path}: a NaN or infinite feature in data row {r + 1}")
    return X, np.asarray(y, dtype=np.int64)


def _is_number(cell: str) -> bool:
    try:
        float(cell)
        return True
    except ValueError:
        return False


def files(task: str, data_dir: Optional[str] = None, data_file: Optional[str] = None) -> list[str]:
    """The files a UCI task reads (found, not read: a missing folder or file is named at once)."""
    if data_file is not None:
        if not os.path.isfile(data_file):
            what = "is a folder; give the file in it" if os.path.isdir(data_file) else "does not exist"
            raise FileNotFoundError(f"data.data_file: {data_file} {what}")
        return [data_file]
    data_dir = data_dir or default_data_dir()
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"data.data_dir: {data_dir} is not a folder (set data.data_dir or NVLDB_UCI_DIR)")
    return [_resolve(data_dir, part) for part in SPECS[task].files]


def load(task: str, data_dir: Optional[str] = None, data_file: Optional[str] = None) -> tuple[np.ndarray, np.ndarray]:
    """(X standardized [n, p], y [n]) of a UCI task; ``data_file`` overrides the file lookup."""
    spec = SPECS[task]
    parts = [read_table(p, spec.features, spec.labels) for p in files(task, data_dir, data_file)]
    X = np.concatenate([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    return standardize(X), y


def block_contexts(x: np.ndarray, arms: int) -> np.ndarray:
    """Disjoint encoding: x [..., p] -> [..., K, K*p], arm k holding x / ||x|| in block k."""
    p = x.shape[-1]
    norm = np.linalg.norm(x, axis=-1, keepdims=True)
    x = x / np.where(norm > 0, norm, 1.0)
    out = np.zeros(x.shape[:-1] + (arms, arms * p))
    for k in range(arms):
        out[..., k, k * p : (k + 1) * p] = x
    return out


MISSING = ("refuse", "drop", "mean")
MISSING_CELLS = ("", "na", "n/a", "nan", "?", "null", "none")  # what a cell left without a value reads as (any case)


def read_user_table(
    path: str, label_column=None, feature_columns=None, header: Optional[bool] = None, missing: str = "refuse"
):
    """A user's CSV (comma-, semicolon- or tab-separated; ``.gz`` allowed) as (X standardized [n, p], y [n], labels).

    ``header``: whether the first row names the columns (``None``: yes when a cell of it that should be a
    feature is neither a number nor a missing value). Read as utf-8, a byte order mark dropped. ``label_column``: the label's column, by 0-based index or (with a header)
    name; ``None`` = the last. ``feature_columns``: the features', likewise; ``None`` = every other column.
    The arms are the distinct labels, in sorted order. ``missing``: a cell without a value (:data:`MISSING_CELLS`)
    is refused naming its line and column (``refuse``), or its row is left out (``drop``), or a feature takes its
    column's mean over the rows that have one (``mean``; a row without a label is left out). Raises ValueError
    naming the file, line and column.
    """
    import csv

    if missing not in MISSING:
        raise ValueError(f"data.missing: {missing!r} is not one of {list(MISSING)}")

    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"data.data_file: {path} " + ("is a folder, not a file" if os.path.isdir(path) else "does not exist")
        )
    try:
        with _open(path) as fh:
            text = fh.read()
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot be read as a text table ({err})") from None
    first = next((line for line in text.splitlines() if line.strip()), "")
    delimiter = next((d for d in (",", ";", "\t") if d in first), None)
    rows = [
        (n, [c.strip() for c in (r if delimiter else r[0].split())])
        for n, r in enumerate(csv.reader(text.splitlines(), delimiter=delimiter or ","), start=1)
        if r and any(c.strip() for c in r)
    ]
    if not rows:
        raise ValueError(f"{path}: no data rows")
    width = len(rows[0][1])
    names = None

    def column(ref, field):
        if isinstance(ref, int) and not isinstance(ref, bool):
            if not -width <= ref < width:
                raise ValueError(f"{field}: column {ref} is out of range; {path} has {width} columns")
            return ref % width
        if names is None:
            raise ValueError(f"{field}: {ref!r} names a column, but {path} has no header row (give a 0-based index)")
        if ref not in names:
            raise ValueError(f"{field}: {path} has no column {ref!r}; its columns are {names}")
        return names.index(ref)

    label_guess = width - 1 if label_column is None or not isinstance(label_column, int) else label_column % width
    if header is None:  # a name: a cell that is neither a number nor a missing value ('', NA, ?, ...)
        header = any(
            not _is_number(c) and c.strip().lower() not in MISSING_CELLS
            for i, c in enumerate(rows[0][1])
            if i != label_guess
        ) or (isinstance(label_column, str) or any(isinstance(f, str) for f in feature_columns or []))
    if header:
        head_line, names, rows = rows[0][0], rows[0][1], rows[1:]
        if not rows:
            raise ValueError(f"{path}: a header row and no data rows")
        twice = next((c for c in names if names.count(c) > 1), None)
        if twice is not None:
            raise ValueError(
                f"{path}, line {head_line}: the header names the column {twice!r} twice; give each column its own name"
            )
    li = width - 1 if label_column is None else column(label_column, "data.label_column")
    fi = (
        [i for i in range(width) if i != li]
        if feature_columns is None
        else [column(f, "data.feature_columns") for f in feature_columns]
    )
    if li in fi:
        raise ValueError(f"data.feature_columns: the label column {li} is also a feature column")
    if not fi:
        raise ValueError("data.feature_columns: no feature column")
    X, labels, kept = [], [], []
    gone = lambda c: c.strip().lower() in MISSING_CELLS  # noqa: E731
    for n, cells in rows:
        if len(cells) != width:
            raise ValueError(f"{path}, line {n}: expected {width} columns, found {len(cells)}")
        # a feature's missing-value cell ('', NA, ?, ...); a label is missing only where empty ('NA' may be a class)
        empty = [i for i in fi if gone(cells[i])] + ([li] if not cells[li].strip() else [])
        if empty and missing == "refuse":
            i = empty[0]
            named = f" ({names[i]!r})" if names else ""
            raise ValueError(
                f"{path}, line {n}, column {i + 1}{named}: missing value {cells[i]!r}; give data.missing drop (leave "
                f"out the rows with one) or mean (a feature takes its column's mean over the other rows)"
            )
        if li in empty or (empty and missing == "drop"):
            continue
        try:
            X.append([math.nan if i in empty else float(cells[i]) for i in fi])
            kept.append(n)  # the file's line of each row kept
        except ValueError:
            bad = next(i for i in fi if not _is_number(cells[i]))
            raise ValueError(f"{path}, line {n}, column {bad + 1}: non-numeric value {cells[bad]!r}") from None
        labels.append(cells[li])
    if not X:
        raise ValueError(f"{path}: every data row has a missing value (data.missing {missing}): no row is left")
    X = np.asarray(X, dtype=np.float64)
    if missing == "mean":
        gap = np.isnan(X)
        for k in np.flatnonzero(gap.any(axis=0)):
            if gap[:, k].all():
                raise ValueError(f"{path}, column {fi[k] + 1}: every value is missing; there is no mean to put in")
            X[gap[:, k], k] = X[~gap[:, k], k].mean()
    if not np.isfinite(X).all():
        r, k = (int(v) for v in np.argwhere(~np.isfinite(X))[0])
        raise ValueError(f"{path}, line {kept[r]}, column {fi[k] + 1}: a NaN or infinite feature")
    classes = sorted(set(labels), key=lambda s: (not _is_number(s), float(s) if _is_number(s) else 0.0, s))
    if len(classes) < 2:
        raise ValueError(f"{path}: the label column holds one class ({classes[0]!r}); a dueling task needs two or more")
    index = {c: k for k, c in enumerate(classes)}
    y = np.asarray([index[c] for c in labels], dtype=np.int64)
    return standardize(X, path, [i + 1 for i in fi]), y, tuple(classes)


def standardize(X: np.ndarray, path: str = "the table", columns: Optional[list] = None) -> np.ndarray:
    """Columns to zero mean and unit variance (zero-variance columns stay 0). Refused naming ``path`` and the column
    (``columns``: each one's 1-based number in the file; default 1..p): one whose mean or variance overflows float64."""
    with np.errstate(over="ignore", invalid="ignore"):
        mean, std = X.mean(axis=0), X.std(axis=0)
        constant = std <= 1e-12 * np.maximum(1.0, np.abs(mean))  # rounding leaves ~1e-17 on a constant column
        Z = np.where(constant, 0.0, (X - mean) / np.where(constant, 1.0, std))
    bad = np.flatnonzero(~(np.isfinite(mean) & np.isfinite(std) & np.isfinite(Z).all(axis=0)))
    if bad.size:
        k = int(bad[0])
        col = columns[k] if columns is not None else k + 1
        r = int(np.argmax(np.abs(X[:, k])))
        raise ValueError(
            f"{path}, column {col}: its values (up to {X[r, k]:.3g}, data row {r + 1}) overflow float64 when "
            f"standardized (mean 0, sd 1); rescale the column (e.g. to other units)"
        )
    return Z
