"""Parsing delimited interaction files with errors that point at file and line.

A file is checked twice: its first :data:`HEAD_LINES` lines one by one before anything else (a
file of junk fails at once, not after minutes of parsing it whole), then whole by pandas; any
error there is traced back to its first bad line. Fields are read as written: ids keep every
character but surrounding blanks (``1, 5`` and ``1,5`` name the same item), and no id is
"missing" for spelling ``NA`` or ``null``; only an empty field is.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable

import numpy as np
import pandas as pd

from bench.errors import DataError

_INT = re.compile(r"^[+-]?\d+$")
#: lines checked one by one before the whole file is parsed
HEAD_LINES = 1000
#: bytes of a line shown in an error
SHOWN = 80


def _bad_field(value: str, kind: str) -> str | None:
    value = value.strip()
    if not value:
        return "is empty"
    if kind == "int" and not _INT.match(value):
        return "is not an integer"
    if kind == "float":
        try:
            number = float(value)
        except ValueError:
            return "is not a number"
        if not math.isfinite(number):
            return "is not a finite number"
    return None


def _first_bad_line(lines: Iterable[str], sep: str, n_cols: int, first_data_line: int,
                    kinds: list[str | None]) -> tuple[int, str, str]:
    """(line number, line, why) of the first malformed data line, or (-1, "", "")."""
    for lineno, line in enumerate(lines, start=1):
        line = line.rstrip("\r\n")
        if lineno < first_data_line or not line.strip():
            continue
        # quoted fields as pandas reads them ("it,24" is one field of a CSV row)
        fields = line.split() if sep == r"\s+" else next(csv.reader([line], delimiter=sep))
        if len(fields) < n_cols:
            return lineno, line, f"expected at least {n_cols} fields separated by {sep!r}, found {len(fields)}"
        for col, (value, kind) in enumerate(zip(fields, kinds)):
            why = _bad_field(value, kind) if kind is not None else None
            if why:
                return lineno, line, f"field {col + 1} ({value.strip()[:SHOWN]!r}) {why}"
    return -1, "", ""


def _error(source: str, lineno: int, line: str, why: str) -> DataError:
    shown = line if len(line) <= SHOWN else line[:SHOWN - 3] + "..."
    return DataError(f"{source}:{lineno}: malformed row {shown!r}: {why}; fix or delete that line")


def _all_kinds(columns: list[int], kinds: list[str]) -> list[str | None]:
    out: list[str | None] = [None] * (max(columns) + 1)
    for c, k in zip(columns, kinds):
        out[c] = k
    return out


def check_head(text: str, source: str, sep: str, columns: list[int], kinds: list[str], header: bool) -> None:
    """Check the first :data:`HEAD_LINES` lines of ``text`` (a prefix of the file is enough).

    Raises:
        DataError: ``source:line: malformed row ...`` for the first bad one.
    """
    lines = io.StringIO(text)
    head = (line for _, line in zip(range(HEAD_LINES + int(header)), lines))
    lineno, line, why = _first_bad_line(head, sep, max(columns) + 1, 2 if header else 1, _all_kinds(columns, kinds))
    if lineno >= 0:
        raise _error(source, lineno, line, why)


def read_table(text: str, source: str, sep: str, columns: list[int], kinds: list[str],
               header: bool) -> list[np.ndarray]:
    """Read selected columns of a delimited text as numpy arrays.

    Args:
        text: the file contents.
        source: name used in error messages (a path, or ``zip:member``).
        sep: field separator ("\\t", ",", or r"\\s+").
        columns: 0-based column positions to return.
        kinds: "int", "float" (finite) or "str" (blanks around it dropped) per returned column.
        header: whether the first line is a header.
    Returns:
        One array per requested column (int64, float64 or object).
    Raises:
        DataError: ``source:line: malformed row ...`` for the first bad row.
    """
    check_head(text, source, sep, columns, kinds, header)
    dtype = {c: {"int": np.int64, "float": np.float64, "str": str}[k] for c, k in zip(columns, kinds)}
    try:
        frame = pd.read_csv(
            io.StringIO(text), sep=sep, header=None, skiprows=1 if header else 0,
            usecols=columns, dtype=dtype, engine="c" if sep != r"\s+" else "python",
            skip_blank_lines=True, comment=None, keep_default_na=False, na_values=[""],
        )
        for c, kind in zip(columns, kinds):
            if kind == "str":
                frame[c] = frame[c].str.strip()
                if (frame[c] == "").any():
                    raise ValueError("empty field")
        if frame.isna().to_numpy().any():
            raise ValueError("missing field")
        floats = [c for c, k in zip(columns, kinds) if k == "float"]
        if floats and not np.isfinite(frame[floats].to_numpy(np.float64)).all():
            raise ValueError("a number that is not finite")
    except (ValueError, pd.errors.ParserError) as exc:
        lineno, line, why = _first_bad_line(io.StringIO(text), sep, max(columns) + 1, 2 if header else 1,
                                            _all_kinds(columns, kinds))
        if lineno < 0:
            raise DataError(f"{source}: could not be parsed ({str(exc).splitlines()[0][:200]})") from None
        raise _error(source, lineno, line, why) from None
    return [frame[c].to_numpy() for c in columns]
