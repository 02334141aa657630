"""`data.augment`: each augmentation changes a training batch (each image its own draw) and keeps its shape, dtype
and range; `none` and evaluation batches are left alone; augmentation runs before normalisation."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tests.conftest import make_image_folder

from litforge.core.errors import ConfigError
from litforge.data.augment import AUGMENTS, build_augment, resolve_augment
from litforge.data.digits import DigitsDataModule

CHANGING = [name for name in AUGMENTS if name != "none"]


def _batch(dtype: torch.dtype, n: int = 16, shape: tuple[int, int, int] = (3, 16, 16)) -> torch.Tensor:
    x = torch.rand(n, *shape, generator=torch.Generator().manual_seed(0))
    return (x * 255).round().to(torch.uint8) if dtype == torch.uint8 else x


@pytest.mark.parametrize("name", CHANGING)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_each_augment_changes_the_batch_and_keeps_shape_dtype_range(name: str, dtype: torch.dtype):
    torch.manual_seed(0)
    x = _batch(dtype)
    out = build_augment(name)(x.clone())
    assert out.shape == x.shape and out.dtype == x.dtype
    top = 255 if dtype == torch.uint8 else 1.0
    assert out.min() >= 0 and out.max() <= top
    changed = (out != x).flatten(1).any(dim=1)
    assert changed.sum() >= len(x) // 4, f"{name} left {int((~changed).sum())} of {len(x)} images as they were"


@pytest.mark.parametrize("name", CHANGING)
def test_each_image_draws_its_own_augmentation(name: str):
    """16 copies of one image must not all come out alike (a batched v2 call would transform them identically)."""
    torch.manual_seed(1)
    x = _batch(torch.uint8, n=1).expand(16, -1, -1, -1).contiguous()
    out = build_augment(name)(x)
    assert len({img.numpy().tobytes() for img in out}) > 2


def test_none_and_old_boolean_spellings():
    assert build_augment("none") is None
    assert resolve_augment(False) == "none" and resolve_augment(True) == "flip_crop"
    with pytest.raises(ConfigError, match=r"data.augment='mixup' is not one of none, flip_crop"):
        resolve_augment("mixup")


def _hook(dm, images: torch.Tensor, training: bool) -> torch.Tensor:
    dm.trainer = SimpleNamespace(training=training)
    return dm.on_after_batch_transfer((images, torch.zeros(len(images), dtype=torch.int64)), 0)[0]


def test_datamodule_augments_training_batches_only_before_normalising():
    dm = DigitsDataModule(augment="trivialaugment", mean=[0.3], std=[0.4])
    plain = DigitsDataModule(augment="none", mean=[0.3], std=[0.4])
    images = DigitsDataModule().split_arrays("train")[0][:32]  # float [0, 1], as digits are held
    assert torch.equal(_hook(plain, images, training=True), plain.normalize(images)), "none changes nothing"
    assert torch.equal(_hook(dm, images, training=False), dm.normalize(images)), "validation is not augmented"
    torch.manual_seed(3)
    trained = _hook(dm, images, training=True)
    torch.manual_seed(3)
    assert torch.equal(trained, dm.normalize(dm.augment_batch(images))), "augment first, then normalise"
    assert not torch.equal(trained, dm.normalize(images))


def test_streamed_image_folder_batches_are_augmented(tmp_path: Path):
    from litforge.data.image_folder import ImageFolderDataModule

    root = make_image_folder(tmp_path / "imgs", per_class=6, size=(12, 12), mode="RGB")
    dm = ImageFolderDataModule(root=str(root), augment="randaugment", max_in_memory_mb=0.0, batch_size=8)
    dm.setup()
    assert dm.in_memory is False
    images, _ = next(iter(dm._stream_loader("train", train=True)))
    assert images.dtype == torch.uint8  # streamed raw, augmented and normalised in the hook like in-memory data
    torch.manual_seed(0)
    assert not torch.equal(_hook(dm, images, training=True), dm.normalize(images))


def test_an_augmentation_of_ones_own_is_the_public_hook_augment_batch():
    """A subclass overrides `augment_batch` (no private attribute): applied to training batches only, before
    normalisation, and `super()` keeps the configured policy."""

    class Inverted(DigitsDataModule):
        def augment_batch(self, images):
            return 1.0 - super().augment_batch(images)

    dm = Inverted(augment="none", mean=[0.3], std=[0.4])
    images = DigitsDataModule().split_arrays("train")[0][:8]
    assert torch.equal(_hook(dm, images, training=True), dm.normalize(1.0 - images))
    assert torch.equal(_hook(dm, images, training=False), dm.normalize(images))
