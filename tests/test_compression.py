"""Pruning, QAT, ONNX export and the compression report, end to end through the CLI on the embedded digits."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from conftest import TINY, read_metrics, run_cli, run_dirs, single_run

PRUNABLE_KEYS = ("net.net.1.weight", "net.net.4.weight", "net.net.7.weight")  # the MLP's three Linear weights


def load_state(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path, weights_only=True, map_location="cpu")["state_dict"]


def sparsity(state: dict[str, torch.Tensor]) -> float:
    zeros = sum(int((state[k] == 0).sum()) for k in PRUNABLE_KEYS)
    return zeros / sum(state[k].numel() for k in PRUNABLE_KEYS)


@pytest.fixture(scope="module")
def pruned_qat_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real short training with pruning and QAT composed: 5 epochs on digits (seconds)."""
    log_dir = tmp_path_factory.mktemp("pq")
    result = run_cli(
        "train.py",
        "callbacks=[default,pruning,qat]",
        "trainer.max_epochs=5",
        "data.batch_size=128",
        "callbacks.model_summary=null",
        "logger=csv",
        "callbacks.pruning.amount=0.5",
        "callbacks.pruning.start_epoch=1",
        "callbacks.pruning.end_epoch=2",
        "callbacks.qat.start_epoch=2",
        "print_config=false",
        "callbacks.progress_bar=null",
        log_dir=log_dir,
    )
    assert result.returncode == 0, result.output[-3000:]
    return single_run(log_dir)


@pytest.mark.slow
def test_pruning_and_qat_compose_in_one_run(pruned_qat_run: Path):
    from litforge.callbacks.qat import load_int8_model

    metrics = read_metrics(pruned_qat_run)["metrics"]
    # QAT: the converted int8 model was tested next to fp32 and is within 1 point of it
    assert metrics["test/acc"] > 0.9, metrics
    assert abs(metrics["test/acc_int8"] - metrics["test/acc"]) <= 0.01, metrics
    # pruning: the schedule reached its target and the tested weights were the pruned ones
    assert metrics["sparsity/overall"] == pytest.approx(0.5, abs=0.01)
    assert metrics["test/sparsity"] == pytest.approx(0.5, abs=0.01)
    # the zeros are real in the saved weights, which are plain (no weight_orig/weight_mask) and load strictly
    ckpts = pruned_qat_run / "checkpoints"
    for ckpt in ckpts.glob("*.ckpt"):
        state = load_state(ckpt)
        assert not any(k.endswith(("_orig", "_mask")) for k in state), ckpt
    assert sparsity(load_state(ckpts / "last.ckpt")) == pytest.approx(0.5, abs=0.01)
    # the int8 model saved beside the checkpoints loads (weights_only) and is really int8
    int8 = load_int8_model(ckpts / "model_int8.pt")
    weight = int8.net[1].weight
    assert "Int8" in type(weight).__name__, type(weight)
    with torch.inference_mode():
        assert int8(torch.randn(4, 1, 8, 8)).shape == (4, 10)


@pytest.mark.slow
def test_pruning_resume_keeps_masks_and_schedule(tmp_path: Path):
    schedule = [
        "callbacks=[default,pruning]",
        "callbacks.pruning.amount=0.66",
        "callbacks.pruning.start_epoch=0",
        "callbacks.pruning.end_epoch=3",
        "callbacks.early_stopping=null",
        *TINY,
    ]
    first = run_cli("train.py", *schedule, "trainer.max_epochs=2", log_dir=tmp_path)
    assert first.returncode == 0, first.output[-3000:]
    interrupted = single_run(tmp_path)
    mid = load_state(interrupted / "checkpoints" / "last.ckpt")
    assert 0.1 < sparsity(mid) < 0.66  # mid-schedule

    resumed = run_cli(
        "train.py",
        *schedule,
        "trainer.max_epochs=5",
        f"ckpt_path={interrupted / 'checkpoints' / 'last.ckpt'}",
        log_dir=tmp_path,
    )
    assert resumed.returncode == 0, resumed.output[-3000:]
    final_run = next(r for r in run_dirs(tmp_path) if r != interrupted)
    final = load_state(final_run / "checkpoints" / "last.ckpt")
    # the schedule ends where an uninterrupted run ends (plain ModelPruning lost its masks here and ended at 35 %)
    assert sparsity(final) == pytest.approx(0.66, abs=0.01)
    assert read_metrics(final_run)["metrics"]["sparsity/overall"] == pytest.approx(0.66, abs=0.01)
    # the masks survived the resume: every weight pruned before the interruption is still zero
    for key in PRUNABLE_KEYS:
        assert bool((final[key][mid[key] == 0] == 0).all()), key


@pytest.mark.slow
def test_export_parity_int8_variants_and_report(pruned_qat_run: Path, tmp_path: Path):
    best = read_metrics(pruned_qat_run)["best_checkpoint"]
    result = run_cli("export.py", f"ckpt_path={best}", "report.rounds=3", "report.threads=[1]", log_dir=tmp_path)
    assert result.returncode == 0, result.output[-3000:]
    assert "ONNX parity on 359 test images" in result.output
    run = single_run(tmp_path, "export")
    metrics = read_metrics(run)["metrics"]
    assert metrics["onnx/max_abs_diff"] <= 1e-4 and metrics["onnx/argmax_agreement"] >= 0.999
    assert (run / "model.onnx").is_file() and not (run / "model.onnx.data").exists()  # small: weights embedded
    with (run / "compression_report.csv").open() as handle:
        rows = {r["variant"]: r for r in csv.DictReader(handle)}
    assert set(rows) == {
        "pruned fp32 (50% zeros), torch eager",
        "pruned fp32 (50% zeros), onnxruntime",
        "QAT int8, torchao eager",
        "PTQ int8 dynamic, torchao eager",
        "PTQ int8 dynamic, onnxruntime",
        "PTQ int8 static QDQ, onnxruntime",
    }
    fp32 = float(rows["pruned fp32 (50% zeros), torch eager"]["test_acc"])
    # the same accuracies as the training run's test (the report rounds to 4 decimals)
    assert fp32 == pytest.approx(read_metrics(pruned_qat_run)["metrics"]["test/acc"], abs=1e-4)
    assert float(rows["QAT int8, torchao eager"]["test_acc"]) == pytest.approx(
        read_metrics(pruned_qat_run)["metrics"]["test/acc_int8"], abs=1e-4
    )
    for row in rows.values():
        assert abs(float(row["test_acc"]) - fp32) <= 0.03, row
        assert all(float(row[k]) > 0 for k in row if k.startswith("ms_")), row
    # pruning shows in the compressed size only; int8 shrinks the file itself
    dense = rows["pruned fp32 (50% zeros), torch eager"]
    assert float(dense["zipped_mb"]) < 0.75 * float(dense["size_mb"])
    assert float(rows["PTQ int8 static QDQ, onnxruntime"]["size_mb"]) < 0.5 * float(dense["size_mb"])
    assert "fastest within 1% accuracy of fp32" in (run / "compression_report.md").read_text()


@pytest.mark.slow
def test_bad_export_requests_fail_clearly(pruned_qat_run: Path, tmp_path: Path, compose_cfg):
    from litforge.core.errors import CheckpointError
    from litforge.jobs.export import export

    ckpt = pruned_qat_run / "checkpoints" / "last.ckpt"
    result = run_cli("export.py", f"ckpt_path={ckpt}", "formats=[tflite]", log_dir=tmp_path)
    assert result.returncode == 1
    assert "unknown export format ['tflite']" in result.stderr and "Traceback" not in result.output

    # a checkpoint whose weights belong to another model than the one it names (a CheckpointError: the CLI prints
    # its one line, as for the format above)
    checkpoint = torch.load(ckpt, weights_only=True, map_location="cpu")
    checkpoint["hyper_parameters"]["net"] = {
        "_target_": "litforge.models.cnn.CNN",
        "_partial_": True,
        "channels": [8, 16],
        "dropout": 0.0,
    }
    other = tmp_path / "other_model.ckpt"
    torch.save(checkpoint, other)
    with pytest.raises(CheckpointError, match="weights do not fit ClassificationTask"):
        export(compose_cfg(f"ckpt_path={other}", config_name="export"))


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mlp", "cnn", "resnet", "vit"])
def test_onnx_parity_for_every_image_net(model: str, compose_cfg, tmp_path: Path):
    small = {"vit": ["model.depth=2", "model.dim=64"], "cnn": ["model.channels=[16,32]"]}.get(model, [])
    """Each net: a checkpoint from a 2-batch run, exported to ONNX; onnxruntime must match PyTorch on the test split."""
    from litforge.jobs.export import export
    from litforge.jobs.train import train

    cfg = compose_cfg(
        f"model={model}",
        *small,
        "data.batch_size=16",
        "print_config=false",
        "test_after_training=false",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
        "trainer.enable_progress_bar=false",
        "trainer.enable_model_summary=false",
        "logger=csv",
    )
    checkpoint = train(cfg)["best_checkpoint"]
    out = tmp_path / "export"
    out.mkdir()
    export_cfg = compose_cfg(
        f"ckpt_path={checkpoint}",
        "quantize=[]",
        "report.batch_sizes=[2]",
        "report.threads=[1]",
        "report.rounds=1",
        f"paths.output_dir={out}",
        config_name="export",
    )
    result = export(export_cfg)
    assert result["metrics"]["onnx/max_abs_diff"] <= 1e-4
    assert result["metrics"]["onnx/argmax_agreement"] >= 0.999
    assert (out / "model.onnx").is_file()
    # the dynamic batch axis: the exported graph runs any batch size, of raw uint8 images (the default input_dtype)
    import onnxruntime as ort

    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == "tensor(uint8)"
    assert session.run(None, {"images": torch.zeros(5, 1, 8, 8, dtype=torch.uint8).numpy()})[0].shape == (5, 10)


def test_wrapper_prefixes_are_stripped_from_consolidated_checkpoints():
    """A consolidated sharded/compiled checkpoint may prefix every key; export loads it like a plain one."""
    from litforge.deploy.net import strip_wrapper_prefixes

    state = {"_forward_module.net.fc.weight": torch.ones(1), "_forward_module.net._orig_mod.fc.bias": torch.ones(1)}
    assert set(strip_wrapper_prefixes({"state_dict": dict(state)})["state_dict"]) == {
        "net.fc.weight",
        "net._orig_mod.fc.bias",
    }
    plain = {"net.fc.weight": torch.ones(1)}
    assert strip_wrapper_prefixes({"state_dict": dict(plain)})["state_dict"] == plain


def test_latency_harness_interleaves_and_reports_medians():
    from litforge.deploy.latency import measure, resolve_threads, torch_runner

    net = torch.nn.Linear(8, 4).eval()
    result = measure(
        {"a": torch_runner(net), "b": torch_runner(net, dtype=torch.bfloat16)},
        {1: torch.randn(1, 8), 16: torch.randn(16, 8)},
        resolve_threads([1]),
        rounds=3,
    )
    assert set(result.median_ms) == {(v, b, 1) for v in "ab" for b in (1, 16)}
    assert all(ms > 0 for ms in result.median_ms.values())


@pytest.mark.slow
def test_structured_pruning_zeroes_whole_output_channels(compose_cfg):
    from litforge.jobs.train import train

    cfg = compose_cfg(
        "callbacks=[default,pruning]",
        "callbacks.pruning.method=ln_structured",
        "callbacks.pruning.amount=0.5",
        "callbacks.pruning.start_epoch=0",
        "model=cnn",
        "model.channels=[8,16]",
        "callbacks.progress_bar=null",
        "print_config=false",
        "logger=csv",
        "trainer.max_epochs=1",
        "trainer.limit_train_batches=2",
        "trainer.limit_val_batches=1",
        "trainer.limit_test_batches=1",
    )
    result = train(cfg)
    state = load_state(Path(result["last_checkpoint"] or result["best_checkpoint"]))
    convs = [k for k, v in state.items() if k.endswith("weight") and v.dim() == 4]
    assert convs
    for key in convs:  # half of each layer's output channels are entirely zero, the rest are not
        dead = (state[key].flatten(1).abs().sum(1) == 0).float().mean().item()
        assert dead == pytest.approx(0.5, abs=0.07), (key, dead)
    assert result["metrics"]["test/sparsity"] == pytest.approx(0.5, abs=0.07)
