"""Tables as columns: read from a CSV or Parquet file, or from a table bundled with scikit-learn (offline).

A table is `{column name: list of values}`, each value a float, a string or None (missing). CSV cells are numbers
where they parse as one; an empty cell or a usual missing marker (`NA`, `nan`, `?`, ...) is None. Parquet needs
pyarrow (litforge's `tabular` extra); the CSV reader is Python's own `csv` module, so `data=csv` costs no
dependency: pandas would be one more large package for what 30 lines do.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from litforge.core.errors import ConfigError

Table = dict[str, list[Any]]
MISSING_MARKERS = frozenset({"", "na", "n/a", "nan", "null", "none", "?", "-"})
BUNDLED = ("wine", "diabetes", "breast_cancer", "iris")  # scikit-learn's tables that ship inside the package


def cell(text: str) -> float | str | None:
    """A CSV cell as a number, a string, or None when it is a missing-value marker."""
    text = text.strip()
    if text.lower() in MISSING_MARKERS:
        return None
    try:
        value = float(text)
    except ValueError:
        return text
    return None if math.isnan(value) else value


def read_table(path: str) -> Table:
    """The columns of a `.csv` (header row first) or `.parquet` file; refused in one line when unreadable."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"data.path={path}: no such file; pass a .csv or .parquet file (or data.path=null)")
    if file.suffix.lower() == ".parquet":
        try:
            import pyarrow.parquet as pq  # type: ignore[import-untyped]
        except ImportError:  # the extra named as litforge.runtime.extras names it (data may not import runtime)
            raise ConfigError(
                f"data.path={path} needs pyarrow, which is not installed: it comes with litforge's `tabular` extra: "
                "pip install -e '.[tabular]' (or '.[all]' for every integration)"
            ) from None

        columns = pq.read_table(file).to_pydict()
        return {str(k): [_plain(v) for v in values] for k, values in columns.items()}
    with file.open(newline="") as handle:
        rows = list(csv.reader(handle))
    if len(rows) < 2:
        raise ConfigError(f"data.path={path}: a CSV file needs a header row and at least one data row")
    header = [name.strip() for name in rows[0]]
    if len(set(header)) != len(header) or "" in header:
        raise ConfigError(f"data.path={path}: the header row needs unique, non-empty column names, got {header}")
    short = [i + 2 for i, row in enumerate(rows[1:]) if len(row) != len(header)]
    if short:
        raise ConfigError(f"data.path={path}: line {short[0]} has a different number of cells than the header")
    return {name: [cell(row[i]) for row in rows[1:]] for i, name in enumerate(header)}


def _plain(value: Any) -> float | str | None:
    if value is None or isinstance(value, str):
        return value
    number = float(value)
    return None if math.isnan(number) else number


def bundled_table(name: str) -> Table:
    """One of scikit-learn's bundled tables, its target last as column `target` (class names for classifiers)."""
    from sklearn import datasets

    loader = {
        "wine": datasets.load_wine,
        "diabetes": lambda: datasets.load_diabetes(scaled=False),
        "breast_cancer": datasets.load_breast_cancer,
        "iris": datasets.load_iris,
    }[name]
    bunch = loader()
    table: Table = {str(n): [float(v) for v in bunch.data[:, i]] for i, n in enumerate(bunch.feature_names)}
    names = getattr(bunch, "target_names", None)
    targets = bunch.target.tolist()
    table["target"] = [str(names[t]) for t in targets] if names is not None else [float(t) for t in targets]
    return table


def write_csv(table: Table, path: str | Path) -> Path:
    """Write `table` as a CSV file (missing values as empty cells): what `read_table` reads back."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    names = list(table)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(names)
        for row in zip(*(table[n] for n in names), strict=True):
            writer.writerow(["" if v is None else (repr(v) if isinstance(v, float) else v) for v in row])
    return path
