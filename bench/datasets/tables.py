"""Parsing delimited interaction files with errors that point at file and line."""

from __future__ import annotations

import io
import re

import numpy as np
import pandas as pd

from bench.errors import DataError

_INT = re.compile(r"^[+-]?\d+$")


def _first_bad_line(text: str, sep: str, n_cols: int, first_data_line: int, kinds: list[str]) -> tuple[int, str, str]:
    for lineno, line in enumerate(text.splitlines()[first_data_line - 1:], start=first_data_line):
        if not line.strip():
            continue
        fields = line.split(sep) if sep != r"\s+" else line.split()
        if len(fields) < n_cols:
            return lineno, line, f"expected at least {n_cols} fields separated by {sep!r}, found {len(fields)}"
        for col, (value, kind) in enumerate(zip(fields, kinds)):
            value = value.strip()
            if kind == "int" and not _INT.match(value):
                return lineno, line, f"field {col + 1} ({value!r}) is not an integer"
            if kind == "float":
                try:
                    float(value)
                except ValueError:
                    return lineno, line, f"field {col + 1} ({value!r}) is not a number"
    return -1, "", ""


def read_table(text: str, source: str, sep: str, columns: list[int], kinds: list[str],
               header: bool) -> list[np.ndarray]:
    """Read selected columns of a delimited text as numpy arrays.

    Args:
        text: the file contents.
        source: name used in error messages (a path, or ``zip:member``).
        sep: field separator ("\\t", ",", or r"\\s+").
        columns: 0-based column positions to return.
        kinds: "int", "float" or "str" per returned column.
        header: whether the first line is a header.
    Returns:
        One array per requested column (int64, float64 or object).
    Raises:
        DataError: ``source:line: malformed row ...`` for the first bad row.
    """
    dtype = {c: {"int": np.int64, "float": np.float64, "str": str}[k] for c, k in zip(columns, kinds)}
    try:
        frame = pd.read_csv(
            io.StringIO(text), sep=sep, header=None, skiprows=1 if header else 0,
            usecols=columns, dtype=dtype, engine="c" if sep != r"\s+" else "python",
            skip_blank_lines=True, comment=None,
        )
        if frame.isna().to_numpy().any():
            raise ValueError("missing field")
    except (ValueError, pd.errors.ParserError) as exc:
        n_cols = max(columns) + 1
        all_kinds = ["str"] * n_cols
        for c, k in zip(columns, kinds):
            all_kinds[c] = k
        lineno, line, why = _first_bad_line(text, sep, n_cols, 2 if header else 1, all_kinds)
        if lineno < 0:
            raise DataError(f"{source}: could not be parsed ({exc})") from None
        shown = line if len(line) <= 80 else line[:77] + "..."
        raise DataError(f"{source}:{lineno}: malformed row {shown!r}: {why}") from None
    return [frame[c].to_numpy() for c in columns]
