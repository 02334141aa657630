"""Tables as columns: read from a CSV or Parquet file, or from a table bundled with scikit-learn (offline).

A table is `{column name: list of values}`, each value a float, a string or None (missing). CSV cells are numbers
where they parse as one; an empty cell or a usual missing marker (`NA`, `nan`, `?`, ...) is None. Parquet needs
pyarrow (litforge's `tabular` extra); the CSV reader is Python's own `csv` module, so `data=csv` costs no
dependency: pandas would be one more large package for what 30 lines do.

Files as users have them: UTF-8 with or without Excel's byte-order mark (`utf-8-sig`; a UTF-16 mark is read too),
another encoding named with `data.encoding` (a file that is not UTF-8 is refused in one line that says so); the
delimiter sniffed by `csv.Sniffer` (`,` `;` tab `|`) or named with `data.delimiter`; blank lines skipped. Then
:func:`check_columns` refuses a table that cannot train (a target among the features, one class, no feature
column) and :func:`check_table_job` the target's kind against the task, before Hydra makes a run folder.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, SupportsFloat

from pydantic import AfterValidator, Field

from litforge.core.errors import ConfigError

Table = dict[str, list[Any]]
MISSING_MARKERS = frozenset({"", "na", "n/a", "nan", "null", "none", "?", "-"})
BUNDLED = ("wine", "diabetes", "breast_cancer", "iris")  # scikit-learn's tables that ship inside the package
MAX_AUTO_CLASSES = 20  # target_kind=auto: whole-number targets with at most this many values are classes
TABULAR = "litforge.data.tabular.TabularDataModule"  # data=csv, whose file the pre-run check reads
# data.delimiter: a character, or its name (`data.delimiter=semicolon` needs no shell quoting)
DELIMITERS = {"comma": ",", "semicolon": ";", "tab": "\t", "pipe": "|"}
SNIFFED = ",;\t|"  # what `auto` lets csv.Sniffer choose from
TASK_OF = {"class": "task=classification", "value": "task=regression"}  # the built-in task that predicts each kind


def known_encoding(name: str) -> str:
    """data.encoding: `auto` or a codec Python knows (`latin-1`, `cp1252`, `utf-16`, ...)."""
    import codecs  # here too: the config check runs this validator without the module's imports (config/source.py)

    if name != "auto":
        codecs.lookup(name)  # LookupError: pydantic reports it as the value refused
    return name


Encoding = Annotated[
    str,
    AfterValidator(known_encoding),
    Field(description="auto or an encoding Python knows", examples=["latin-1"]),
]
Delimiter = Literal["auto", ",", ";", "\t", "|", "comma", "semicolon", "tab", "pipe"]

_DECIMAL_COMMA = re.compile(r"[+-]?\d*,\d+")
_READ_AHEAD: dict[tuple[Any, ...], Table] = {}  # the table the pre-run check read, taken once by the datamodule


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


def read_table(
    path: str, encoding: str = "auto", delimiter: str = "auto", key: str = "data.path", keep: bool = False
) -> Table:
    """The columns of a `.csv` (header row first; gzipped too) or `.parquet` file; refused in one line when unreadable.

    `encoding`/`delimiter`: `auto` (UTF-8 with or without a byte-order mark; the delimiter csv.Sniffer finds) or
    the file's own. `key`: the config key that named the file, for the messages. `keep`: hold the table for the
    next read of the same unchanged file (the pre-run check reads it, the datamodule takes it: read once).
    """
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"{key}={path}: no such file; pass a .csv or .parquet file (or data.path=null)")
    if file.suffix.lower() == ".parquet":
        try:
            import pyarrow.parquet as pq  # type: ignore[import-untyped]
        except ImportError:  # the extra named as litforge.runtime.extras names it (data may not import runtime)
            raise ConfigError(
                f"{key}={path} needs pyarrow, which is not installed: it comes with litforge's `tabular` extra: "
                "pip install -e '.[tabular]' (or '.[all]' for every integration)"
            ) from None
        try:
            columns = pq.read_table(file).to_pydict()
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError: not Parquet, or damaged
            why = str(exc).splitlines()[0].rsplit("': ", 1)[-1].split(". ")[0]  # pyarrow's first sentence
            raise ConfigError(
                f"{key}={path}: not a Parquet file, or a damaged one ({why}): a CSV file's name must end in .csv; "
                "else write the file again (pandas.DataFrame.to_parquet)"
            ) from None
        return {str(k): [_plain(v) for v in values] for k, values in columns.items()}
    stat = os.stat(file)
    ahead = (str(file.resolve()), stat.st_mtime_ns, stat.st_size, encoding, delimiter)
    if ahead in _READ_AHEAD:
        return _READ_AHEAD.pop(ahead)
    raw = file.read_bytes()
    if raw.startswith(b"\x1f\x8b"):  # `.csv.gz`, as pandas reads it
        raw = gzip.decompress(raw)
    if raw.startswith(b"PK\x03\x04"):  # a zip: Excel's .xlsx, or a zipped CSV file
        raise ConfigError(
            f"{key}={path}: a zip archive (an Excel workbook?), not a text table; save it as CSV UTF-8 (Excel: "
            "File > Save As > CSV UTF-8) or unzip it, and pass that file"
        )
    text = decode(raw, path, encoding, key)
    sep = sniff_delimiter(text) if delimiter == "auto" else DELIMITERS.get(delimiter, delimiter)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sep)
    rows: list[list[str]] = []
    lines: list[int] = []  # each row's line in the file, for the messages (blank lines are skipped)
    try:
        for row in reader:
            if any(c.strip() for c in row):  # a blank line (editors leave them at the end) is no row
                rows.append(row)
                lines.append(reader.line_num)
    except csv.Error as exc:
        raise ConfigError(
            f"{key}={path}: line {reader.line_num} is not CSV ({exc}); fix or re-export the file"
        ) from None
    if len(rows) < 2:
        raise ConfigError(f"{key}={path}: a CSV file needs a header row and at least one data row")
    header = [name.strip() for name in rows[0]]
    header[0] = header[0].lstrip("\ufeff")  # a byte-order mark left by an explicit data.encoding=utf-8
    if all(_number(name) for name in header):  # a file without a header: its first row would be lost as names
        raise ConfigError(
            f"{key}={path}: the first line holds numbers ({','.join(header)}), not column names; add a header line "
            "naming the columns (the target's name is data.target)"
        )
    if len(set(header)) != len(header) or "" in header:
        raise ConfigError(f"{key}={path}: the header row needs unique, non-empty column names, got {header}")
    short = [line for row, line in zip(rows[1:], lines[1:], strict=True) if len(row) != len(header)]
    if short:
        raise ConfigError(
            f"{key}={path}: line {short[0]} has a different number of cells than the header; fix that line, or "
            "pass data.delimiter if the file uses another separator"
        )
    table = {name: [cell(row[i]) for row in rows[1:]] for i, name in enumerate(header)}
    if sep != ",":  # `;`-separated files come from locales that write 0,5 for 0.5
        table = {name: decimal_commas(values) for name, values in table.items()}
    if keep:
        _READ_AHEAD.clear()
        _READ_AHEAD[ahead] = table
    return table


def _number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


def decode(raw: bytes, path: str, encoding: str, key: str = "data.path") -> str:
    """A file's text. `auto`: UTF-8, its byte-order mark dropped (Excel's "CSV UTF-8"), or UTF-16 after a UTF-16
    mark. No guess beyond that: a Latin-1 or cp1252 file decodes under either (every byte is some character), so
    which one it is can only be said, with data.encoding; a file that is not UTF-8 is refused in one line."""
    if encoding == "auto":
        encoding = "utf-16" if raw.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) else "utf-8-sig"
    try:
        return raw.decode(encoding)
    except LookupError:
        raise ConfigError(
            f"data.encoding={encoding}: not an encoding Python knows; e.g. data.encoding=latin-1"
        ) from None
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        name = "UTF-8" if exc.encoding.startswith("utf-8") else exc.encoding
        raise ConfigError(
            f"{key}={path}: line {line} is not {name} (byte {raw[exc.start]:#04x}); pass the file's encoding, "
            "e.g. data.encoding=latin-1 (or save it as CSV UTF-8)"
        ) from None


def decimal_commas(values: list[Any]) -> list[Any]:
    """A column whose every text cell is a number written with a decimal comma (`0,5`, `-12,75`), as numbers; any
    other column as it is. Hand-written: the csv module reads cells, not numbers, and `locale.atof` would depend
    on the machine's locale, not on the file's."""
    texts = [v for v in values if isinstance(v, str)]
    if not texts or not all(_DECIMAL_COMMA.fullmatch(v) for v in texts):
        return values
    return [float(v.replace(",", ".")) if isinstance(v, str) else v for v in values]


def sniff_delimiter(text: str) -> str:
    """The delimiter csv.Sniffer finds in the first 64 KiB (whole lines) among `, ; tab |`; `,` where it cannot
    tell (a table of one column)."""
    sample = text[:65536]
    if len(text) > len(sample):
        sample = sample[: sample.rfind("\n") + 1] or sample
    try:
        return csv.Sniffer().sniff(sample, delimiters=SNIFFED).delimiter
    except csv.Error:
        return ","


def _plain(value: str | SupportsFloat | None) -> float | str | None:
    if value is None or isinstance(value, str):
        return value
    number = float(value)
    return None if math.isnan(number) else number


def bundled_table(name: str) -> Table:
    """One of scikit-learn's bundled tables, its target last as column `target` (class names for classifiers)."""
    from sklearn import datasets  # torch-free config check (sklearn ~1 s)

    loader = {
        "wine": datasets.load_wine,
        "diabetes": lambda: datasets.load_diabetes(scaled=False),
        "breast_cancer": datasets.load_breast_cancer,
        "iris": datasets.load_iris,
    }[name]
    bunch = loader()
    table: Table = {str(n): [float(v) for v in bunch.data[:, i]] for i, n in enumerate(bunch.feature_names)}
    names = bunch.get("target_names")  # a Bunch is a dict; regression tables have no class names
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


# ---- what a table can train: its columns, and its target against the task ----------------------------------------
def resolve_target_kind(kind: str, values: list[Any]) -> str:
    """`class` or `value`; `auto`: text, or at most MAX_AUTO_CLASSES whole numbers, is a class."""
    if kind != "auto":
        return kind
    if any(isinstance(v, str) for v in values):
        return "class"
    whole = all(float(v).is_integer() for v in values)
    return "class" if whole and len(set(values)) <= MAX_AUTO_CLASSES else "value"


def check_columns(
    table: Table,
    source: str,
    target: str | None,
    features: list[str] | None,
    categorical: list[str] | None,
    target_kind: str,
) -> tuple[str, list[str], str]:
    """(the target column, the feature columns, the target's kind: class or value), or one line saying why the
    table cannot train: no such column, the target among the features, no feature column, a single class, a class per
    row."""
    target = target or list(table)[-1]
    if target not in table:
        raise ConfigError(f"data.target={target}: {source} has no such column; its columns: {list(table)}")
    columns = features or [c for c in table if c != target]
    unknown = [c for c in [*columns, *(categorical or [])] if c not in table]
    if unknown:
        raise ConfigError(f"data.features/categorical: {source} has no columns {unknown}; its columns: {list(table)}")
    if target in columns:  # the model would read the answer from its inputs and score 1.0
        raise ConfigError(
            f"data.features=[{','.join(columns)}]: it names the target {target}, so the model would train on the "
            f"answer; drop {target} from data.features (null: every column but the target)"
        )
    if not columns:
        header = next(iter(table))
        other = next((d for d in ";\t|," if d in header), None)  # the header read as one name: another delimiter?
        raise ConfigError(
            f"{source}: no feature column, only the target {target!r}; "
            + (
                f"its header holds {other!r}: pass data.delimiter={_typed(other)}"
                if other
                else "add input columns to the file, or pick another data.target"
            )
        )
    values = [v for v in table[target] if v is not None]
    if len(values) < 3:
        raise ConfigError(f"data.target={target}: fewer than 3 rows of {source} have a target value")
    if target in (categorical or []):  # listing the target there says it holds categories
        if target_kind == "value":
            raise ConfigError(
                f"data.categorical=[{','.join(categorical or [])}]: it names the target {target}, which "
                f"data.target_kind=value reads as numbers; drop {target} from data.categorical (or "
                "data.target_kind=class)"
            )
        target_kind = "class"
    kind = resolve_target_kind(target_kind, values)
    classes = sorted({str(v) for v in values})
    if kind == "class" and len(classes) < 2:  # torchmetrics' multiclass metrics would fail inside fit
        raise ConfigError(
            f"data.target={target}: every row of {source} has the one class {classes[0]!r}; a classifier needs two or "
            "more: pick another data.target (or add rows of the other classes)"
        )
    many = len(classes) > max(MAX_AUTO_CLASSES, len(values) // 2)
    if kind == "class" and many and target not in (categorical or []):  # an ID, a name, free text
        raise ConfigError(
            f"data.target={target}: {len(classes)} of the {len(values)} rows of {source} are classes of their own "
            "(an identifier or free text?), so a classifier could not learn any; pick another data.target, or "
            "data.target_kind=value if it holds numbers"
        )
    return target, columns, kind


def kind_refusal(
    target: str, kind: str, target_kind: str, categorical: list[str] | None, values: list[Any], predicts: str
) -> str:
    """One line: the target is read as `kind` (class or value) but the task predicts the other; names task= and
    data.target_kind."""
    distinct = len({str(v) for v in values if v is not None})
    if kind == "value":
        how = f"data.target_kind={target_kind} reads its {distinct} distinct numbers as values"
        fix = "pass task=regression (data.target_kind=value), or data.target_kind=class if they are class labels"
    elif target in (categorical or []):
        how = "data.categorical lists it, so it is read as classes"
        fix = f"drop {target} from data.categorical and pass data.target_kind=value, or task=classification"
    elif any(isinstance(v, str) for v in values):
        how = "it holds text (classes)"
        fix = "pass task=classification (data.target_kind=class), or a column of numbers as data.target"
    else:
        how = f"data.target_kind={target_kind} reads its {distinct} whole numbers as classes"
        fix = "pass data.target_kind=value to predict them as numbers, or task=classification"
    wants = "classes" if predicts == "class" else "numbers"
    return f"data.target={target}: {how}, but {TASK_OF[predicts]} predicts {wants}; {fix}"


def check_table_job(data: Mapping[str, Any], predicts: str | None, job: str = "train") -> None:
    """`data=csv` in a training `job`, before Hydra makes a run folder: the file reads (encoding, delimiter), its
    columns can train (:func:`check_columns`) and the target's kind fits what the task predicts (`predicts`: class,
    value or None for a task of the user's). The table read is kept for the datamodule: the file is read once."""
    if job != "train" or str(data.get("_target_")) != TABULAR:
        return  # another datamodule (a subclass reads its own format): it checks the same at its construction
    path, target_kind, categorical = data.get("path"), str(data.get("target_kind", "auto")), data.get("categorical")
    if path:
        table = read_table(str(path), str(data.get("encoding", "auto")), str(data.get("delimiter", "auto")), keep=True)
        source = f"data.path={path}"
    else:
        table, source = bundled_table(str(data.get("dataset"))), f"data.dataset={data.get('dataset')}"
    categorical = list(categorical) if categorical else None
    features = list(data["features"]) if data.get("features") else None
    target, _, kind = check_columns(table, source, data.get("target"), features, categorical, target_kind)
    if predicts in TASK_OF and kind != predicts:
        raise ConfigError(kind_refusal(target, kind, target_kind, categorical, table[target], predicts))


def _typed(delimiter: str) -> str:
    """A delimiter as a command line takes it."""
    return {v: k for k, v in DELIMITERS.items()}.get(delimiter, delimiter)
