"""Predict and export driven by what the task and the datamodule declare (litforge.WritesPredictions,
DeclaresInputs, ComparesOutputs), on a token task written here as a user would: variable-length int64 token ids,
several labels per sample. Also the shapes an earlier guide taught (a task without `predict_step`) keep predicting.

One training step makes the checkpoint (module fixture); predict and export run in-process as their jobs.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, TensorDataset

from litforge import ExampleInput, LitforgeTask
from litforge.core.bounds import UnitInterval
from litforge.core.errors import ConfigError

LABELS = ["billing", "bug", "login"]
VOCAB = 24  # token ids 1..23; 0 pads


def token_rows(count: int, seed: int) -> tuple[Tensor, Tensor]:
    """Rows of 3..14 token ids padded with 0; label k is on where token 3k+1 occurs."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.zeros(count, 14, dtype=torch.int64)
    for row in ids:
        length = int(torch.randint(3, 15, (1,), generator=g))
        row[:length] = torch.randint(1, VOCAB, (length,), generator=g)
    labels = torch.stack([(ids == 3 * k + 1).any(1) for k in range(len(LABELS))], 1).float()
    return ids, labels


class TokenData(pl.LightningDataModule):
    """Token ids in memory; reads `input=` files of space-separated ids (no declared inputs: an earlier shape)."""

    kind = "tokens"

    def __init__(self, batch_size: int = 16) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.splits = {s: token_rows(48, seed) for seed, s in enumerate(("train", "val", "test"))}

    def describe(self) -> dict[str, Any]:
        return {"vocab_size": VOCAB, "labels": LABELS}

    def _loader(self, split: str) -> DataLoader:
        return DataLoader(TensorDataset(*self.splits[split]), batch_size=self.batch_size)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train")

    def val_dataloader(self) -> DataLoader:
        return self._loader("val")

    def test_dataloader(self) -> DataLoader:
        return self._loader("test")

    def read_inputs(self, path: str) -> tuple[list[str], Tensor]:
        lines = [line for line in Path(path).read_text().splitlines() if line.strip()]
        rows = [[int(t) for t in line.split()] for line in lines]
        ids = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        return lines, ids


class DeclaredTokens(TokenData):
    """The same data, declaring export's inputs: int64 token ids with a dynamic batch and length."""

    def example_inputs(self) -> list[ExampleInput]:
        return [ExampleInput("token_ids", self.splits["test"][0][:4], {0: "batch", 1: "length"})]

    def deployment_facts(self) -> dict[str, str]:
        return {"labels": json.dumps(LABELS), "padding_id": "0"}


class BagNet(nn.Module):
    """Embedding, mean over the non-padding tokens, one logit per label."""

    def __init__(self, vocab_size: int, num_labels: int, width: int = 8) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width, padding_idx=0)
        self.head = nn.Linear(width, num_labels)

    def forward(self, ids: Tensor) -> Tensor:
        mask = (ids != 0).unsqueeze(-1).float()
        return self.head((self.embed(ids) * mask).sum(1) / mask.sum(1).clamp_min(1))


class OldTask(LitforgeTask):
    """The shape an earlier guide taught: training steps and a forward, no predict_step of its own."""

    data_kind = "tokens"
    decisions = ("threshold",)

    def __init__(
        self,
        net: dict[str, Any],
        optimizer: dict[str, Any],
        vocab_size: int,
        labels: list[str],
        threshold: UnitInterval = 0.5,
        scheduler: dict[str, Any] | None = None,
        loss: dict[str, Any] | None = None,
        run_config: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(optimizer=optimizer, scheduler=scheduler, run_config=run_config)
        self.save_hyperparameters(ignore=["run_config"])
        self.labels, self.threshold = labels, threshold
        self.net = BagNet(vocab_size, len(labels))

    def forward(self, ids: Tensor) -> Tensor:
        return self.net(ids)

    def step_loss(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        return nn.functional.binary_cross_entropy_with_logits(self(batch[0]), batch[1])

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self.log("val/loss", self.step_loss(batch))

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self.log("test/loss", self.step_loss(batch))


class TokenTask(OldTask):
    """Several labels per sample: predict writes `labels=a;b` and a probability per label; export's parity is
    judged by the per-label decisions at the threshold."""

    def predict_step(self, batch: Tensor, batch_idx: int) -> dict[str, Tensor]:
        probabilities = torch.sigmoid(self(batch))
        return {"predicted": probabilities >= self.threshold, "probabilities": probabilities}

    def prediction_rows(self, out: Any) -> list[dict[str, str | int | float]]:
        return [
            {"labels": self.names(hot), **{f"p_{n}": round(p, 6) for n, p in zip(self.labels, probs, strict=True)}}
            for hot, probs in zip(out["predicted"].tolist(), out["probabilities"].tolist(), strict=True)
        ]

    def answer_columns(self, target: Tensor) -> dict[str, str | int | float]:
        return {"true_labels": self.names(target.bool().tolist())}

    def names(self, hot: list[bool]) -> str:
        return ";".join(n for n, on in zip(self.labels, hot, strict=True) if on)

    def compare_outputs(self, reference: Tensor, exported: Tensor) -> dict[str, float]:
        decide = lambda logits: torch.sigmoid(logits) >= self.threshold  # noqa: E731
        same = (decide(reference) == decide(exported)).all(1).float().mean()
        return {"agreement": float(same), "max_abs_diff": float((reference - exported).abs().max())}


class WrongRows(TokenTask):
    def prediction_rows(self, out: Any) -> Any:
        return {"labels": out["predicted"]}  # a dict of tensors, not a list of rows


@pytest.fixture(scope="module")
def token_ckpt(tmp_path_factory) -> Path:
    from omegaconf import open_dict

    from litforge.testing import compose
    from litforge.testing.checks import trained_checkpoint

    cfg = compose(["trainer.max_epochs=1"])
    with open_dict(cfg):
        cfg.data, cfg.task = {"_target_": f"{__name__}.DeclaredTokens"}, {"_target_": f"{__name__}.TokenTask"}
    return trained_checkpoint(cfg, tmp_path_factory.mktemp("tokens"), "train")[0]


def relabelled(ckpt: Path, tmp: Path, cls: str) -> Path:
    """The checkpoint with another task class recorded (the same hparams and weights)."""
    checkpoint = torch.load(ckpt, weights_only=True)
    checkpoint["litforge"]["task_class"] = f"{__name__}.{cls}"
    torch.save(checkpoint, tmp / f"{cls}.ckpt")
    return tmp / f"{cls}.ckpt"


def run(job: str, ckpt: Path, tmp: Path, **values: object) -> dict[str, Any]:
    from litforge.jobs.export import export
    from litforge.jobs.predict import predict
    from litforge.testing.checks import job_config

    cfg = job_config(job, tmp, job, ckpt_path=str(ckpt), trusted_packages=[__name__], device="cpu", **values)
    return (predict if job == "predict" else export)(cfg)


def test_predict_writes_the_rows_the_task_declares(token_ckpt: Path, tmp_path: Path) -> None:
    """The test split: the task's columns and its answers, accuracy from them; `input=` rows of two lengths."""
    result = run("predict", token_ckpt, tmp_path, output=str(tmp_path / "test.csv"))
    lines = (tmp_path / "test.csv").read_text().splitlines()
    assert lines[0] == "input,labels,p_billing,p_bug,p_login,true_labels", lines[0]
    assert len(lines) == 49 and result["metrics"]["predictions"] == 48
    rows = [line.split(",") for line in lines[1:]]
    assert result["metrics"]["accuracy"] == pytest.approx(sum(r[1] == r[5] for r in rows) / 48)  # labels vs true
    assert {label for r in rows for label in r[5].split(";") if label} <= set(LABELS)

    (tmp_path / "new.txt").write_text("1 4 7\n2 3 5 6 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22\n")
    run("predict", token_ckpt, tmp_path, input=str(tmp_path / "new.txt"), output=str(tmp_path / "new.csv"))
    lines = (tmp_path / "new.csv").read_text().splitlines()
    assert lines[0] == "input,labels,p_billing,p_bug,p_login" and lines[1].startswith("1 4 7,") and len(lines) == 3


def test_a_task_without_the_rows_or_with_a_wrong_type_is_one_line(
    token_ckpt: Path, tmp_path: Path, monkeypatch
) -> None:
    """Without `prediction_rows`/`answer_columns`: refused on the class, and on its source before torch loads; rows
    of a wrong type: refused on the first batch. One line each, showing the signature."""
    from litforge.checkpointing.metadata import check_predict_source
    from litforge.core.contracts import check_predict_task

    (tmp_path / "userrows.py").write_text(
        "import pytorch_lightning as pl\n\n\nclass Bare(pl.LightningModule):\n"
        "    def predict_step(self, batch, batch_idx):\n        return {'predicted': batch}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    from userrows import Bare  # type: ignore[import-not-found]

    for check, task in ((check_predict_task, Bare), (check_predict_source, "userrows.Bare")):
        with pytest.raises(ConfigError) as refused:
            check(task, "ckpt_path=a.ckpt")
        message = str(refused.value)
        assert message.startswith("ckpt_path=a.ckpt: task `Bare` lacks `prediction_rows`, `answer_columns`"), message
        assert "`prediction_rows(out: Mapping[str, Tensor]) -> list[dict[str, str | int | float]]`" in message
        assert "\n" not in message
    with pytest.raises(ConfigError) as refused:
        run("predict", relabelled(token_ckpt, tmp_path, "WrongRows"), tmp_path)
    message = str(refused.value)
    assert "`WrongRows.prediction_rows` returned a dict, not a list: it returns column name" in message, message
    assert "prediction_rows(out: Mapping[str, Tensor])" in message and "\n" not in message


def test_a_task_of_the_earlier_guide_without_predict_step_still_predicts(token_ckpt: Path, tmp_path: Path) -> None:
    """Its forward output as `predicted` (one column per value), with a DeprecationWarning naming predict_step."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run("predict", relabelled(token_ckpt, tmp_path, "OldTask"), tmp_path, output=str(tmp_path / "old.csv"))
    lines = (tmp_path / "old.csv").read_text().splitlines()
    assert lines[0] == "input,predicted_0,predicted_1,predicted_2,true_predicted_0,true_predicted_1,true_predicted_2"
    deprecated = [str(w.message) for w in seen if issubclass(w.category, DeprecationWarning)]
    assert any("has no predict_step of its own" in m and "define `predict_step" in m for m in deprecated), deprecated


def test_a_token_model_exports_with_a_dynamic_length(token_ckpt: Path, tmp_path: Path, capsys) -> None:
    """int64 token ids of any length: onnxruntime equals torch at two lengths; the metadata holds the facts and the
    threshold; parity by the task's own comparison; the int8 variants built or said why not."""
    import onnxruntime as ort

    from litforge.tasks.restore import load_for_inference
    from litforge.testing.checks import job_config

    result = run("export", token_ckpt, tmp_path, **{"task.threshold": 0.4})
    printed = capsys.readouterr().out
    assert "ONNX parity on token_ids 4x14" in printed and "ONNX parity on token_ids 4x7" in printed, printed
    assert "int8 static QDQ not built" in printed and "torchao int8 dynamic: nn.Linear layers in int8" in printed
    assert result["metrics"]["onnx/agreement@4x7"] == 1.0
    assert {Path(p).name for p in result["written"]} >= {"model.onnx", "model_int8_dynamic.onnx"}

    session = ort.InferenceSession(result["onnx"], providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    assert json.loads(meta["labels"]) == LABELS and json.loads(meta["decisions"]) == {"threshold": 0.4}
    assert json.loads(meta["inputs"]) == [{"name": "token_ids", "dtype": "int64", "shape": ["batch", "length"]}]
    task, _, _ = load_for_inference(
        job_config("export", tmp_path, "x", ckpt_path=str(token_ckpt), trusted_packages=[__name__])
    )
    net = task.net.eval()
    for length in (5, 23):
        ids = torch.randint(1, VOCAB, (3, length))
        exported = torch.as_tensor(session.run(None, {"token_ids": ids.numpy()})[0])
        with torch.inference_mode():
            diff = float((exported - net(ids)).abs().max())
        print(f"length {length}: max |onnxruntime - torch| = {diff:.2e}")
        assert diff < 1e-5, (length, diff)


def test_data_of_the_earlier_guide_without_declared_inputs_still_exports(token_ckpt: Path, tmp_path: Path) -> None:
    """A datamodule with neither `example_inputs` nor `split_arrays`: its test loader's inputs, in their own dtype
    (int64 here; they were cast to float32), one fixed length, parity on the whole test split."""
    result = run("export", token_ckpt, tmp_path, quantize=[], data={"_target_": f"{__name__}.TokenData"})
    assert result["metrics"]["onnx/agreement@48x14"] == 1.0 and result["metrics"]["onnx/max_abs_diff@48x14"] < 1e-5
