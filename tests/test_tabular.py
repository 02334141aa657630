"""Tables with no code of the user's: `data=csv` (CSV/Parquet files or scikit-learn's bundled tables) through
`task=classification` / `task=regression` and `model=mlp`, then predict.py (CSV in, CSV out) and export.py (ONNX,
onnxruntime parity, names and statistics in the metadata)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch

from conftest import read_metrics, run_cli, run_dirs, single_run
from litforge.core.errors import ConfigError
from litforge.data.tables import bundled_table, read_table, write_csv
from litforge.data.tabular import TabularDataModule


def small_table() -> dict[str, list]:
    """12 rows: a number column with a missing cell, a text column, a number column that is a category, a target."""
    size = [1.0, 2.0, None, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, 12.0]
    colour = ["red", "blue", "red", None, "green", "blue", "red", "blue", "green", "red", "blue", "red"]
    grade = [1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 1.0, 2.0, 3.0]
    label = ["yes", "no"] * 6
    return {"size": size, "colour": colour, "grade": grade, "label": label}


def test_a_csv_file_reads_as_numbers_text_and_missing_cells(tmp_path: Path):
    path = tmp_path / "t.csv"
    path.write_text("a,b,c\n1.5,x,\n2,NA,7\n?,y,8\n")
    assert read_table(str(path)) == {"a": [1.5, 2.0, None], "b": ["x", None, "y"], "c": [None, 7.0, 8.0]}
    (tmp_path / "bad.csv").write_text("a,b\n1,2,3\n")
    with pytest.raises(ConfigError, match="line 2 has a different number of cells than the header"):
        read_table(str(tmp_path / "bad.csv"))


def test_the_encoding_is_fitted_on_the_training_rows_and_travels_as_plain_data(tmp_path: Path):
    path = write_csv(small_table(), tmp_path / "t.csv")
    data = TabularDataModule(
        path=str(path), target="label", categorical=["grade"], val_fraction=0.25, test_fraction=0.25
    )
    facts = data.describe()
    assert facts["class_names"] == ["no", "yes"] and facts["num_classes"] == 2
    # size (a number), colour one-hot over the values seen in training, grade one-hot although numeric
    names = facts["feature_names"]
    assert names[0] == "size" and {n.split("=")[0] for n in names[1:]} == {"colour", "grade"}
    train_x, _ = data.split_arrays("train")
    size = data.encoding[0]
    seen = [v for v in train_x[:, 0].tolist() if not math.isnan(v)]
    assert size["mean"] == pytest.approx(sum(seen) / len(seen))  # the training rows only
    # a missing number becomes the training mean, i.e. 0 after standardisation; a missing text is all zeros
    encoded = data.normalize(data.read_inputs(str(path))[1])
    assert encoded[2, 0] == 0 and encoded[3, 1 : 1 + len(data.encoding[1]["values"])].abs().sum() == 0
    # the fitted state is plain data: it loads with weights_only=True, as every checkpoint does
    state = data.state_dict()
    torch.save(state, tmp_path / "s.pt")
    assert torch.load(tmp_path / "s.pt", weights_only=True) == state


def test_a_parquet_file_gives_the_same_table(tmp_path: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = small_table()
    pq.write_table(pa.table(table), tmp_path / "t.parquet")
    assert read_table(str(tmp_path / "t.parquet")) == table


def test_the_target_kind_and_the_bundled_tables():
    assert TabularDataModule(dataset="wine").describe()["num_classes"] == 3
    diabetes = TabularDataModule(dataset="diabetes").describe()
    assert diabetes["num_targets"] == 1 and len(diabetes["feature_names"]) == 10  # auto: many values = a value
    with pytest.raises(ConfigError, match="data.target=nope: data.dataset=wine .* has no such column"):
        TabularDataModule(dataset="wine", target="nope")


def test_a_loss_that_does_not_fit_the_task_is_refused_in_one_line(compose_cfg):
    from litforge.config.check import check_config

    check_config(compose_cfg("task=regression", "data=csv"))  # the task's own loss: mse
    assert compose_cfg("task=regression").loss._target_ == "torch.nn.MSELoss"
    with pytest.raises(ConfigError) as refused:
        check_config(compose_cfg("task=regression", "loss=cross_entropy"))
    assert "\n" not in str(refused.value) and "task=regression: loss=mse, huber or l1" in str(refused.value)
    with pytest.raises(ConfigError, match="loss._target_=torch.nn.MSELoss does not fit task._target_="):
        check_config(compose_cfg("loss=mse"))


@pytest.mark.slow
def test_a_csv_file_trains_a_classifier_with_no_code_then_exports_with_parity(tmp_path: Path):
    import onnxruntime as ort

    wine = bundled_table("wine")
    wine["region"] = ["north" if i % 3 else "south" for i in range(len(wine["target"]))]  # a text column
    wine["alcohol"][5] = None  # and a missing cell
    path = write_csv(wine, tmp_path / "wine.csv")
    logs = tmp_path / "logs"
    # a table with no code (docs/extending.md runs its own commands: tests/test_extending.py)
    args = ["data=csv", f"data.path={path}", "data.target=target", "data.batch_size=16", "trainer.max_epochs=15"]
    trained = run_cli("train.py", *args, "print_config=false", "callbacks.progress_bar=null", log_dir=logs)
    assert trained.returncode == 0, trained.output[-3000:]
    metrics = read_metrics(single_run(logs))
    assert metrics["metrics"]["test/acc"] >= 0.9  # 36 test wines, 3 cultivars

    exported = run_cli("export.py", f"ckpt_path={metrics['best_checkpoint']}", log_dir=logs)
    assert exported.returncode == 0, exported.output[-3000:]
    onnx_path = Path(json.loads((run_dirs(logs, "export")[-1] / "metrics.json").read_text())["onnx"])
    assert f"\n{onnx_path}\n" in exported.stdout  # its path printed whole on its own line
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    names = json.loads(meta["feature_names"])
    assert "region=north" in names and json.loads(meta["class_names"]) == ["class_0", "class_1", "class_2"]
    assert meta["git_dirty"] in ("true", "false", "unknown") and meta["source_checkpoint"].endswith(".ckpt")
    # raw encoded rows in (a missing number as NaN), the same class as the checkpoint's own task out
    data = TabularDataModule(path=str(path), target="target")
    rows = data.read_inputs(str(path))[1][:8]
    rows[0, names.index("alcohol")] = float("nan")
    onnx_out = session.run(None, {"features": rows.numpy()})[0]
    checkpoint = torch.load(metrics["best_checkpoint"], weights_only=True)
    from litforge.tasks.restore import restore_task

    task = restore_task(checkpoint, metrics["best_checkpoint"])
    with torch.inference_mode():
        expected = task(data.normalize(rows))
    assert torch.allclose(torch.from_numpy(onnx_out), expected, atol=1e-4)


@pytest.mark.slow
def test_regression_on_diabetes_reaches_r2_0_4_and_predicts_a_csv_file(tmp_path: Path):
    logs = tmp_path / "logs"
    trained = run_cli("train.py", "experiment=diabetes_regression", "callbacks.progress_bar=null", log_dir=logs)
    assert trained.returncode == 0, trained.output[-3000:]
    metrics = read_metrics(single_run(logs, "diabetes_regression"))
    assert metrics["objective"]["metric"] == "val/r2"
    assert metrics["metrics"]["test/r2"] >= 0.4, metrics["metrics"]

    table = bundled_table("diabetes")
    new = write_csv({k: v[:6] for k, v in table.items() if k != "target"}, tmp_path / "new.csv")  # no target column
    predicted = run_cli("predict.py", f"ckpt_path={metrics['best_checkpoint']}", f"input={new}", log_dir=logs)
    assert predicted.returncode == 0, predicted.output[-3000:]
    with (run_dirs(logs, "predict")[-1] / "predictions.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [r["input"] for r in rows] == [f"{new}:{i}" for i in range(2, 8)]
    values = [float(r["target"]) for r in rows]  # in the target's own units (disease progression, 25..346)
    assert all(25 <= v <= 346 for v in values) and len(set(values)) == 6


# ---- #39: tables as they come (encodings, delimiters, blank lines; tables that cannot train; target kind vs task) --
ROWS = [(0.5 + i % 7, 3.0 - i % 5, "yes" if i % 3 else "no") for i in range(30)]


def _text(sep: str = ",", decimal: str = ".") -> str:
    """A header and 30 rows: a, b (numbers), label (yes/no), separated by `sep`."""
    lines = [sep.join(("a", "b", "label"))]
    lines += [sep.join((f"{a}".replace(".", decimal), f"{b}".replace(".", decimal), y)) for a, b, y in ROWS]
    return "\n".join(lines) + "\n"


def test_an_excel_csv_utf8_file_with_a_byte_order_mark_reads_its_first_column_by_its_name(tmp_path: Path):
    path = tmp_path / "excel.csv"
    path.write_bytes(("\ufeff" + _text()).encode("utf-8"))  # Excel's "CSV UTF-8": the mark before the first name
    assert list(read_table(str(path))) == ["a", "b", "label"]  # was ['\ufeffa', 'b', 'label']
    assert TabularDataModule(path=str(path), target="a", target_kind="value").describe()["target_names"] == ["a"]
    # Excel's "Unicode text": UTF-16 with its mark, tab-separated
    (tmp_path / "unicode.txt.csv").write_bytes(_text("\t").encode("utf-16"))
    assert read_table(str(tmp_path / "unicode.txt.csv")) == read_table(str(path))


def test_a_latin1_file_is_refused_in_one_line_naming_the_file_and_data_encoding_which_then_reads_it(tmp_path: Path):
    path = tmp_path / "cities.csv"
    path.write_bytes("city,label\nZürich,yes\nGenève,no\nBern,yes\n".encode("latin-1"))
    with pytest.raises(ConfigError) as refused:
        read_table(str(path))  # was a bare 'utf-8' codec can't decode byte 0xfc, naming neither the file nor a key
    message = str(refused.value)
    assert message.startswith(f"data.path={path}: line 2 is not UTF-8 (byte 0xfc)") and "\n" not in message
    assert "data.encoding=latin-1" in message
    assert read_table(str(path), encoding="latin-1")["city"] == ["Zürich", "Genève", "Bern"]


def test_the_delimiter_is_sniffed_or_set_and_decimal_commas_read_as_numbers(tmp_path: Path):
    comma = read_table(str(write_text(tmp_path / "comma.csv", _text())))
    for name, text in {"semi": _text(";", ","), "tab": _text("\t"), "pipe": _text("|")}.items():
        # the semicolon file trained on zero features with 30 "classes" (each whole line one class) and exited 0
        assert read_table(str(write_text(tmp_path / f"{name}.csv", text))) == comma, name
    semi = str(tmp_path / "semi.csv")
    assert read_table(semi, delimiter="semicolon") == read_table(semi, delimiter=";") == comma
    with pytest.raises(ConfigError, match="line 2 has a different number of cells .* data.delimiter"):
        read_table(semi, delimiter=",")  # the key wins over sniffing: 0,5;3,0;yes is 3 cells
    points = str(write_text(tmp_path / "points.csv", _text(";")))
    assert list(read_table(points, delimiter=",")) == ["a;b;label"]
    with pytest.raises(ConfigError, match=r"only the target 'a;b;label'; its header holds ';': pass data.delimiter="):
        TabularDataModule(path=points, delimiter="comma")


def test_blank_lines_are_skipped_and_lines_keep_their_numbers_in_messages(tmp_path: Path):
    path = write_text(tmp_path / "blank.csv", _text() + "\n\n  \n")  # trailing blank lines, as editors leave them
    assert len(read_table(str(path))["label"]) == len(ROWS)  # was: line 32 has a different number of cells
    bad = write_text(tmp_path / "bad.csv", "a,b\n1,2\n\n3,4,5\n")
    with pytest.raises(ConfigError, match="line 4 has a different number of cells"):
        read_table(str(bad))


def test_a_gzipped_csv_reads_and_a_workbook_or_a_file_without_header_is_refused_in_one_line(tmp_path: Path):
    import gzip
    import zipfile

    (tmp_path / "t.csv.gz").write_bytes(gzip.compress(_text().encode()))  # as pandas reads it
    assert read_table(str(tmp_path / "t.csv.gz")) == read_table(str(write_text(tmp_path / "t.csv", _text())))
    with zipfile.ZipFile(tmp_path / "book.xlsx", "w") as book:  # was "line 1 is not UTF-8 ... data.encoding=latin-1"
        book.writestr("xl/workbook.xml", "<workbook/>")
    with pytest.raises(ConfigError, match=r"book.xlsx: a zip archive \(an Excel workbook\?\), not a text table; save"):
        read_table(str(tmp_path / "book.xlsx"))
    headless = write_text(tmp_path / "headless.csv", "".join(f"{i % 7},{i % 5},{i % 2}\n" for i in range(1, 41)))
    with pytest.raises(ConfigError, match=r"the first line holds numbers \(1,1,1\), not column names; add a header"):
        read_table(str(headless))  # was: "the header row needs unique names" (or, unique, its first row lost as names)


def test_rows_without_a_target_are_left_out_and_the_run_says_how_many(tmp_path: Path, caplog):
    """An empty target cell and a missing marker (NA) each leave their row out of every split, in a line that names
    data.target, the count and the file (they were dropped without a word)."""
    rows = _text().splitlines()
    rows[1], rows[2] = rows[1].rsplit(",", 1)[0] + ",", rows[2].rsplit(",", 1)[0] + ",NA"
    path = write_text(tmp_path / "t.csv", "\n".join(rows) + "\n")
    with caplog.at_level("INFO", logger="litforge.data.tabular"):
        data = TabularDataModule(path=str(path))
    said = [r.getMessage() for r in caplog.records if r.name == "litforge.data.tabular"]
    assert said == [
        f"data.target=label has no value in 2 of the 30 rows of data.path={path} (an empty cell or a missing marker "
        "such as NA): those rows are left out of training, validation and test"
    ]
    assert sum(len(data.split_arrays(split)[1]) for split in ("train", "val", "test")) == 28


def write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("columns", "arguments", "refusal"),
    [  # each trained silently or ended in a traceback
        (
            _text(),
            {"features": ["a", "b", "label"]},  # trained on the answer: test/acc 1.0 without a word
            "data.features=[a,b,label]: it names the target label, so the model would train on the answer; drop label",
        ),
        (
            "a,label\n" + "".join(f"{i},yes\n" for i in range(10)),  # torchmetrics' num_classes traceback
            {},
            "data.target=label: every row of data.path=",
        ),
        (
            "label\n" + "yes\nno\n" * 5,  # trained on zero feature columns
            {},
            "no feature column, only the target 'label'; add input columns to the file",
        ),
        (
            "a,name\n" + "".join(f"{i % 5},customer-{i}\n" for i in range(60)),  # each row its own "class"
            {},
            "data.target=name: 60 of the 60 rows of data.path=",
        ),
    ],
    ids=["target-among-the-features", "a-single-class", "zero-feature-columns", "a-class-per-row"],
)
def test_a_table_that_cannot_train_is_refused_in_one_line(tmp_path: Path, columns, arguments, refusal):
    path = write_text(tmp_path / "t.csv", columns)
    with pytest.raises(ConfigError) as refused:
        TabularDataModule(path=str(path), **arguments)
    assert refusal in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    ("column", "arguments", "predicts", "words"),
    [
        (["yes", "no"] * 20, {}, "value", "it holds text (classes), but task=regression predicts numbers"),
        ([i * 0.37 for i in range(40)], {}, "class", "data.target_kind=auto reads its 40 distinct numbers as values"),
        ([i * 0.37 for i in range(40)], {"categorical": ["y"]}, "value", "data.categorical lists it"),
        ([float(i % 5) for i in range(40)], {}, "value", "data.target_kind=auto reads its 5 whole numbers as classes"),
    ],
    ids=["text-target-with-regression", "distinct-floats-with-classification", "categorical-target", "whole-numbers"],
)
def test_the_target_kind_against_the_task_is_one_line_naming_task_and_target_kind(
    tmp_path: Path, column, arguments, predicts, words
):
    from litforge.data.tables import TABULAR, check_table_job

    path = write_csv({"x": [float(i) for i in range(40)], "y": column}, tmp_path / "t.csv")
    data = {"_target_": TABULAR, "path": str(path), "target": "y", "target_kind": "auto", **arguments}
    with pytest.raises(ConfigError) as refused:
        check_table_job(data, predicts)  # was: unexpected keyword argument 'num_classes' (or 'num_targets')
    message = str(refused.value)
    assert message.startswith("data.target=y: ") and words in message and "\n" not in message
    assert "task=" in message and "data.target_kind" in message
    check_table_job(data, "class" if predicts == "value" else "value")  # the other task takes it


def test_an_explicit_target_kind_against_the_task_and_what_the_job_builds(compose_cfg):
    from litforge.config.check import check_config
    from litforge.jobs.build import build_task
    from litforge.tasks.classification import ClassificationTask

    with pytest.raises(ConfigError, match="data.target_kind=value does not fit task._target_=.*task=regression for"):
        check_config(compose_cfg("experiment=diabetes_regression", "task=classification"))
    # what the pre-run check cannot read (a subclass's own format, a sweep's job): the task's build says it
    cfg = compose_cfg("data=csv", "model=mlp")
    with pytest.raises(ConfigError, match="does not take num_targets: the data's target is read as numbers; pass task"):
        build_task(cfg, {"input_shape": [3], "num_targets": 1})
    with pytest.raises(ConfigError, match=r"the data has 1 class \(\['yes'\]\): a classifier needs two or more"):
        ClassificationTask(net={}, optimizer={}, input_shape=[3], num_classes=1, class_names=["yes"])


def test_the_pre_run_check_reads_the_file_once_for_the_datamodule(tmp_path: Path, monkeypatch):
    from litforge.data import tables

    path = write_text(tmp_path / "t.csv", _text(";", ","))
    tables.check_table_job({"_target_": tables.TABULAR, "path": str(path), "target": "label"}, "class")
    monkeypatch.setattr(tables, "decode", lambda *a, **k: pytest.fail("read twice"))
    assert TabularDataModule(path=str(path), target="label").describe()["class_names"] == ["no", "yes"]
