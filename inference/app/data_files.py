"""Reading a user's data matrix from a ``.csv`` or ``.npy`` file: :func:`read_data`.

What ``ppl-zoo select`` (:mod:`inference.app.select_command`) reads: rows are examples,
columns dimensions; a CSV file may have a header row; every cell must be a finite
number, and an error names the file, the column and the line of the first one that is
not. No paper is implemented here; the files are the user's.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np

__all__ = ["DATA_SUFFIXES", "read_data"]

#: The data files ``ppl-zoo select`` reads.
DATA_SUFFIXES = (".csv", ".npy")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _read_csv(path: Path) -> tuple[np.ndarray, list[str] | None]:
    """The rows of a CSV file as floats, and its header (None without one)."""
    header, rows, width = None, [], None
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle)
        for cells in reader:
            line = reader.line_num
            cells = [c.strip() for c in cells]
            if not cells or all(c == "" for c in cells):
                continue  # blank lines
            if width is None:
                width = len(cells)
                if not all(_is_number(c) for c in cells):
                    header = cells
                    continue
            elif len(cells) != width:
                raise ValueError(f"{path}: line {line} has {len(cells)} columns, but the "
                                 f"{'header' if header is not None else 'first row'} has "
                                 f"{width} (every row needs the same number of columns)")
            row = []
            for j, cell in enumerate(cells):
                column = (f"column {header[j]!r}" if header is not None and header[j]
                          else f"column {j + 1}")
                try:
                    value = float(cell)
                except ValueError:
                    where = "below the header " if header is not None else ""
                    hint = ("; the file must be comma-separated" if re.search(r"[;\t]", cell)
                            else "")
                    raise ValueError(f"{path}: {column}, line {line}: {cell!r} is not a "
                                     f"number (every cell {where}must be numeric{hint})"
                                     ) from None
                if not math.isfinite(value):
                    raise ValueError(f"{path}: {column}, line {line}: {cell!r} is not a "
                                     "finite number (missing values are not supported)")
                row.append(value)
            rows.append(row)
    if width is None:
        raise ValueError(f"{path}: the file is empty (no rows of numbers)")
    if not rows:
        raise ValueError(f"{path}: the file has a header row but no rows of numbers")
    return np.asarray(rows, dtype=np.float64), header


def _read_npy(path: Path) -> np.ndarray:
    try:
        x = np.load(path, allow_pickle=False)
    except ValueError as error:  # object arrays, corrupt files
        raise ValueError(f"{path}: not a readable numeric .npy array ({error})") from None
    if not isinstance(x, np.ndarray):
        raise ValueError(f"{path}: holds no single array (an .npz archive?); save one 2-D "
                         "array with numpy.save")
    if x.dtype.kind not in "biuf":
        raise ValueError(f"{path}: the array must be numeric; got dtype {x.dtype}")
    if x.ndim != 2:
        hint = (" (one example per row: for one-dimensional data save x.reshape(-1, 1))"
                if x.ndim == 1 else "")
        raise ValueError(f"{path}: the array must be 2-D (examples x dimensions); got shape "
                         f"{x.shape}{hint}")
    if x.size == 0:
        raise ValueError(f"{path}: the array is empty; got shape {x.shape}")
    x = x.astype(np.float64)
    if not np.all(np.isfinite(x)):
        row, col = np.argwhere(~np.isfinite(x))[0]
        raise ValueError(f"{path}: the array must be finite; row {row + 1}, column {col + 1} "
                         f"holds {x[row, col]}")
    return x


def read_data(path) -> tuple[np.ndarray, list[str] | None]:
    """Read a data matrix from a ``.csv`` or ``.npy`` file.

    Parameters
    ----------
    path : str or path-like
        A ``.csv`` file (comma-separated; a first row whose cells are not all
        numbers is a header, every later row must be numeric) or a ``.npy`` file
        holding one 2-D numeric array.

    Returns
    -------
    x : numpy.ndarray (N, D)
        The data as float64, one example per row.
    header : list of str or None
        The CSV file's column names, None without a header (and for ``.npy``).

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    ValueError
        Another extension; an empty file; rows of different lengths; a non-numeric
        or non-finite cell (the message names its column and line); an array that is
        not 2-D or not numeric.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in DATA_SUFFIXES:
        raise ValueError(f"--data must be a {' or '.join(DATA_SUFFIXES)} file; got {str(path)!r}")
    if not path.exists():
        raise FileNotFoundError(f"--data: no such file: {str(path)!r}")
    if not path.is_file():
        raise ValueError(f"--data must be a file; {str(path)!r} is a folder")
    if suffix == ".npy":
        return _read_npy(path), None
    return _read_csv(path)
