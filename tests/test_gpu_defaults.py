"""GPU defaults that a CPU machine cannot exercise directly: the composed values of `trainer=gpu`, the TF32 switch
(`matmul_precision`, applied on CUDA runs only and recorded in provenance.json) and pinned host memory for loaders
that feed a GPU. CUDA is faked where the decision depends on it; what only a GPU can show is in
benchmarks/gpu_smoke.py."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from hydra.utils import instantiate

from litforge import provenance
from litforge.data.pinned import pin_memory_for
from litforge.errors import ConfigError
from litforge.train import apply_matmul_precision
from litforge.validation import check_run


def test_trainer_gpu_holds_the_gpu_defaults(compose_cfg):
    cfg = compose_cfg("trainer=gpu")
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"
    assert cfg.trainer.benchmark is True  # cudnn autotuning for fixed input sizes
    assert cfg.trainer.log_every_n_steps == 50  # each logging step is a host sync
    assert compose_cfg().trainer.log_every_n_steps == 10  # the CPU default is unchanged
    assert cfg.matmul_precision == "high"


@pytest.fixture
def restore_matmul_precision():
    before, cudnn_tf32 = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    yield
    torch.set_float32_matmul_precision(before)
    torch.backends.cudnn.allow_tf32 = cudnn_tf32


def test_matmul_precision_applies_to_cuda_runs_only(monkeypatch, restore_matmul_precision):
    torch.set_float32_matmul_precision("highest")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert apply_matmul_precision("high") is None
    assert torch.get_float32_matmul_precision() == "highest"  # CPU runs stay exact fp32

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert apply_matmul_precision("high", "cpu") is None  # trainer=cpu on a GPU machine
    assert torch.get_float32_matmul_precision() == "highest"
    assert apply_matmul_precision("high", "auto") == "high"
    assert torch.get_float32_matmul_precision() == "high" and torch.backends.cudnn.allow_tf32
    assert apply_matmul_precision("highest", "gpu") == "highest"
    assert not torch.backends.cudnn.allow_tf32


def test_a_bad_matmul_precision_is_refused_in_one_line(compose_cfg):
    with pytest.raises(ConfigError, match="matmul_precision") as error:
        check_run(compose_cfg("matmul_precision=fast"))
    assert "\n" not in str(error.value) and "highest" in str(error.value)


def test_provenance_records_the_process_wide_settings(tmp_path):
    record = provenance.write_start(tmp_path, settings={"matmul_precision": "high"})
    assert record["settings"] == {"matmul_precision": "high"}
    assert json.loads((tmp_path / provenance.FILE).read_text())["settings"] == {"matmul_precision": "high"}


def _trainer_on(device: str) -> SimpleNamespace:
    return SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device(device)))


def test_pinned_memory_only_for_loaders_that_feed_cuda():
    assert pin_memory_for(None) is False
    assert pin_memory_for(_trainer_on("cpu")) is False
    assert pin_memory_for(_trainer_on("cuda")) is True
    assert pin_memory_for(SimpleNamespace(strategy=SimpleNamespace())) is False  # not set up yet


@pytest.mark.parametrize("device, pinned", [("cpu", False), ("cuda", True)])
def test_host_loaders_pin_memory_when_the_trainer_is_on_cuda(compose_cfg, tmp_path, device, pinned):
    text = tmp_path / "corpus.txt"
    text.write_text("".join(f"document {i}: the quick brown fox jumps over the lazy dog.\n" for i in range(200)))
    cfg = compose_cfg("experiment=gpt_char", "data=text_file", f"data.path={text}")
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    datamodule.trainer = _trainer_on(device)
    assert datamodule.train_dataloader().pin_memory is pinned
    assert datamodule.val_dataloader().pin_memory is pinned
