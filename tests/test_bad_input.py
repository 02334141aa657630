"""Every mistake a user can make on the command line ends with exit code != 0 and one clear message, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow


def _fails_clearly(result, *needles: str) -> None:
    assert result.returncode != 0, result.output[-2000:]
    assert "Traceback" not in result.output, result.output[-4000:]
    for needle in needles:
        assert needle in result.output, f"{needle!r} not in:\n{result.output[-2000:]}"


def test_unknown_option_lists_the_available_ones(tmp_path: Path):
    result = run_cli("train.py", "model=resnt", log_dir=tmp_path)
    _fails_clearly(result, "Could not find 'model/resnt'", "Available options in 'model'", "resnet")


def test_unknown_key_says_how_to_add_one(tmp_path: Path):
    _fails_clearly(run_cli("train.py", "trainer.max_epoch=3", log_dir=tmp_path), "max_epoch")


def test_incompatible_model_and_data_fails_before_training(tmp_path: Path):
    result = run_cli("train.py", "model=vit", "model.patch_size=3", log_dir=tmp_path)
    _fails_clearly(result, "litforge: error", "patch_size", "8x8")
    assert "Epoch" not in result.output


def test_missing_data_folder_names_it(tmp_path: Path):
    missing = tmp_path / "no_such_folder"
    result = run_cli("train.py", "data=image_folder", f"data.root={missing}", log_dir=tmp_path)
    _fails_clearly(result, "litforge: error", str(missing), "does not exist")


def test_required_value_left_out_says_which(tmp_path: Path):
    _fails_clearly(run_cli("train.py", "data=image_folder", log_dir=tmp_path), "data.root")


def test_checkpoint_path_that_does_not_exist(tmp_path: Path):
    for script in ("train.py", "eval.py", "predict.py"):
        result = run_cli(script, f"ckpt_path={tmp_path / 'nope.ckpt'}", log_dir=tmp_path)
        _fails_clearly(result, "litforge: error", "nope.ckpt", "does not exist")


def test_file_that_is_not_a_checkpoint(tmp_path: Path):
    bogus = tmp_path / "notes.ckpt"
    bogus.write_text("these are my notes, not a checkpoint")
    for script in ("train.py", "eval.py"):
        _fails_clearly(run_cli(script, f"ckpt_path={bogus}", log_dir=tmp_path), "litforge: error", "not a readable")


def test_gpu_trainer_without_a_gpu(tmp_path: Path):
    _fails_clearly(run_cli("train.py", "trainer=gpu", log_dir=tmp_path), "litforge: error", "trainer=cpu")
