"""Labelled texts (`data=text`) and multi-label classification (`task=multilabel`): files in each format as users
write them, the offline recipe through the real command line, the auto threshold, and an exact resume after kill -9."""

from __future__ import annotations

import csv
import json
import logging
import signal
from pathlib import Path

import pytest
import torch

from conftest import TINY, read_metrics, run_cli, single_run
from litforge.core.errors import ConfigError
from litforge.data.labelled_text import LabelledTextDataModule
from test_reliability import FAULTS_ENV, assert_same_weights, fault, last_ckpt

ROWS = [
    ("I was charged twice for my plan", ["billing"]),
    ("The app crashes when I open the invoice", ["billing", "bug"]),
    ("I cannot log in", ["account"]),
    ("The export button does nothing", ["bug"]),
    ("Refund the last payment please", ["billing"]),
    ("Password reset mail never arrives and the page freezes", ["account", "bug"]),
] * 4
LABELS = ["account", "billing", "bug"]


def write(folder: Path, suffix: str, rows: list = ROWS) -> Path:
    """`rows` as a file users bring: JSON lines with a list of labels, a CSV with `a;b` cells, fastText's .txt."""
    path = folder / f"messages{suffix}"
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps({"text": t, "labels": labels}) + "\n" for t, labels in rows))
    elif suffix == ".csv":
        path.write_text("text,labels\n" + "".join(f'"{t}",{";".join(labels)}\n' for t, labels in rows))
    else:
        path.write_text("".join(" ".join(f"__label__{x}" for x in labels) + f" {t}\n" for t, labels in rows))
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".txt"])
def test_each_file_format_reads_to_the_same_padded_multi_hot_batches(suffix: str, tmp_path: Path, caplog) -> None:
    data = LabelledTextDataModule(path=str(write(tmp_path, suffix)), max_length=5, batch_size=4, test_fraction=0.25)
    with caplog.at_level(logging.INFO, logger="litforge.data.labelled_text"):
        facts = data.describe()
    assert facts["class_names"] == LABELS and facts["multilabel"] and facts["num_classes"] == 3
    assert "data.max_length=5: 12 of 24 texts were longer and were cut" in caplog.text  # the 7-, 8- and 9-word rows
    ids, targets = next(iter(data.train_dataloader()))
    assert ids.dtype == torch.int64 and ids.shape[0] == 4 and ids.shape[1] <= 5
    assert targets.dtype == torch.float32 and targets.shape == (4, 3) and (targets.sum(1) >= 1).all()
    lengths = (ids != 0).sum(1)
    assert lengths.max() == ids.shape[1] and all((row[n:] == 0).all() for row, n in zip(ids, lengths, strict=True))


def test_single_label_rows_give_class_indices_and_the_label_field_is_found(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text("".join(json.dumps({"body": t, "label": labels[0]}) + "\n" for t, labels in ROWS))
    data = LabelledTextDataModule(path=str(path), text="body")
    assert data.describe()["multilabel"] is False
    _, targets = next(iter(data.train_dataloader()))
    assert targets.dtype == torch.int64 and targets.ndim == 1


def test_the_checkpointed_tokenizer_reads_new_inputs_without_the_training_file(tmp_path: Path) -> None:
    trained = LabelledTextDataModule(train=str(write(tmp_path, ".jsonl")), val_fraction=0.2, test_fraction=0.2)
    trained.describe()
    state = torch.load(_saved(trained.state_dict(), tmp_path), weights_only=True)  # as a checkpoint holds it
    restored = LabelledTextDataModule(train=str(tmp_path / "gone.jsonl"))
    restored.load_state_dict(state)
    (tmp_path / "new.txt").write_text("my invoice is wrong\n\nI cannot log in to the app\n")
    names, ids = restored.read_inputs(str(tmp_path / "new.txt"))
    assert names == [f"{tmp_path / 'new.txt'}:1", f"{tmp_path / 'new.txt'}:3"] and ids.shape == (2, 7)
    assert restored.describe() == trained.describe()
    (example,) = trained.example_inputs()
    assert example.name == "token_ids" and example.example.dtype == torch.int64 and example.dynamic_axes[1] == "length"
    facts = trained.deployment_facts()
    assert json.loads(facts["label_names"]) == LABELS and "invoice" in json.loads(facts["tokenizer"])["words"]


def _saved(state: dict, folder: Path) -> Path:
    torch.save(state, folder / "state.pt")
    return folder / "state.pt"


def test_a_label_only_the_test_file_has_is_refused_naming_its_line(tmp_path: Path) -> None:
    test = write(tmp_path, ".csv", [("my parcel is late", ["shipping"])])
    data = LabelledTextDataModule(train=str(write(tmp_path, ".jsonl")), test=str(test))
    with pytest.raises(ConfigError, match=r"messages.csv:2: label 'shipping' is not in the training rows"):
        data.describe()


@pytest.mark.slow
def test_text_multilabel_recipe_trains_offline_and_records_per_label_scores_and_its_threshold(tmp_path: Path) -> None:
    """`experiment=text_multilabel` on the shipped messages through the real CLI, threshold=auto (its default)."""
    result = run_cli("train.py", "experiment=text_multilabel", *TINY, "trainer.max_epochs=1", log_dir=tmp_path)
    assert result.returncode == 0, result.output[-3000:]
    run_dir = single_run(tmp_path, "text_multilabel")
    metrics = read_metrics(run_dir)["metrics"]
    names = ["account", "billing", "bug", "feature_request", "shipping"]
    for split in ("val", "test"):
        assert {f"{split}/f1", f"{split}/ap", *(f"{split}/f1_{n}" for n in names)} <= set(metrics)
    assert metrics["test/f1"] > 0.3, "four steps already beat chance"
    hparams = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["hyper_parameters"]
    assert hparams["threshold"] == "auto" and len(hparams["fitted_threshold"]) == 5
    assert all(0.05 <= t <= 0.95 for t in hparams["fitted_threshold"])

    from tensorboard.backend.event_processing.event_accumulator import IMAGES, EventAccumulator

    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={IMAGES: 0}).Reload()
    assert "test/precision_recall" in events.Tags()["images"]
    assert {f"test/f1_{n}" for n in names} <= set(events.Tags()["scalars"])
    check_the_jobs_after_training(run_dir / "checkpoints" / "last.ckpt", names, tmp_path)


def check_the_jobs_after_training(ckpt: Path, names: list[str], tmp_path: Path) -> None:
    """The trained text checkpoint through predict (a .txt of new texts: label names per line, at two thresholds),
    eval (per-label F1 at a threshold given now) and export (int64 ids of any length in ONNX, equal to torch)."""
    new = tmp_path / "new.txt"
    new.write_text("I was charged twice for my plan this month\nThe parcel never arrived\n")
    rows = {}
    for threshold in (0.01, 0.99):
        out = tmp_path / f"predictions_{threshold}.csv"
        args = (f"ckpt_path={ckpt}", f"input={new}", f"output={out}", f"task.threshold={threshold}")
        result = run_cli("predict.py", *args, log_dir=tmp_path)
        assert result.returncode == 0, result.output[-3000:]
        rows[threshold] = list(csv.DictReader(out.open()))
        assert [r["input"] for r in rows[threshold]] == [f"{new}:1", f"{new}:2"]
        assert set(rows[threshold][0]) == {"input", "labels", *(f"p_{n}" for n in names)}
    assert all(r["labels"] == ";".join(names) for r in rows[0.01]), "every label above a threshold of 0.01"
    assert all(r["labels"] == "" for r in rows[0.99]), "no label above 0.99 after one epoch"

    result = run_cli("eval.py", f"ckpt_path={ckpt}", "task.threshold=0.4", log_dir=tmp_path)
    assert result.returncode == 0, result.output[-3000:]
    assert all(f"test/f1_{n}" in result.output for n in names)

    result = run_cli("export.py", f"ckpt_path={ckpt}", "quantize=[]", log_dir=tmp_path)
    assert result.returncode == 0, result.output[-3000:]
    import onnxruntime as ort

    onnx = next((tmp_path / "export").rglob("model.onnx"))
    session = ort.InferenceSession(str(onnx))
    meta = session.get_modelmeta().custom_metadata_map
    assert json.loads(meta["label_names"]) == names and "tokenizer" in meta
    for length in (3, 17):
        ids = torch.randint(1, 50, (2, length))
        (got,) = session.run(None, {session.get_inputs()[0].name: ids.numpy()})
        assert got.shape == (2, len(names)), f"length {length}"


def test_the_default_mlp_reads_a_texts_mean_word_embedding_whatever_its_padding() -> None:
    from litforge.models.mlp import MLP

    torch.manual_seed(0)
    net = MLP(vocab_size=20, num_classes=3, hidden_dims=(8,), dropout=0.0).eval()
    ids = torch.tensor([[4, 5, 6, 0], [7, 0, 0, 0]])
    padded = torch.cat([ids, torch.zeros(2, 5, dtype=torch.long)], dim=1)
    assert net(ids).shape == (2, 3)
    torch.testing.assert_close(net(padded), net(ids))  # the mean leaves the padding out
    assert len(net.pipeline_stages(2)) == 2  # the embedding joins the first layer's stage


def test_a_users_jsonl_trains_multilabel_with_every_default_net_and_setting(tmp_path: Path) -> None:
    """The issue's command as a user types it, `data=text data.path=<file> task=multilabel`: no model= (the MLP)."""
    path = write(tmp_path, ".jsonl")
    result = run_cli("train.py", "data=text", f"data.path={path}", "task=multilabel", *TINY, log_dir=tmp_path)
    assert result.returncode == 0, result.output[-3000:]
    assert "model=mlp" in result.output and "test/f1_billing" in read_metrics(single_run(tmp_path))["metrics"]


@pytest.mark.slow
def test_single_label_text_trains_with_task_classification_and_a_transformer(tmp_path: Path) -> None:
    path = tmp_path / "one.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": labels[0]}) + "\n" for t, labels in ROWS * 2))
    overrides = ["data=text", f"data.path={path}", "model=text_transformer", "model.dim=16", "model.depth=1"]
    result = run_cli("train.py", *overrides, *TINY, "trainer.max_epochs=1", log_dir=tmp_path)
    assert result.returncode == 0, result.output[-3000:]
    assert "test/acc" in read_metrics(single_run(tmp_path))["metrics"]


# 2 epochs of 5 batches (the shipped messages' 420 training rows at 64 a batch, limited): step 7 is mid-epoch 1
RESUME = [*TINY, "experiment=text_multilabel", "data.batch_size=64", "trainer.limit_train_batches=5"]


@pytest.mark.slow
def test_kill_9_mid_epoch_on_text_resumes_exactly(tmp_path: Path) -> None:
    whole = run_cli("train.py", *RESUME, log_dir=tmp_path / "whole")
    assert whole.returncode == 0, whole.output[-3000:]
    uninterrupted = single_run(tmp_path / "whole", "text_multilabel")

    killed = run_cli(
        "train.py",
        *RESUME,
        "checkpoint_every=3",
        *fault("SignalAt", step=8, signal="SIGKILL"),
        log_dir=tmp_path / "killed",
        env=FAULTS_ENV,
    )
    assert killed.returncode == -signal.SIGKILL, killed.output[-3000:]
    run_dir = single_run(tmp_path / "killed", "text_multilabel")
    saved = last_ckpt(run_dir)
    assert (saved["epoch"], saved["global_step"]) == (1, 6), "the step-6 clock save, at the start of epoch 1"
    resume = ["resume=auto", "task_name=text_multilabel", "+callbacks.fault.step=-1"]
    resumed = run_cli("train.py", *resume, log_dir=tmp_path / "killed", env=FAULTS_ENV)
    assert resumed.returncode == 0, resumed.output[-3000:]
    assert_same_weights(last_ckpt(uninterrupted), last_ckpt(run_dir))
    expected, got = read_metrics(uninterrupted)["metrics"], read_metrics(run_dir)["metrics"]
    for name in ("val/f1", "val/loss", "test/f1", "test/loss"):
        assert got[name] == expected[name], name
