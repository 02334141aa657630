"""ImageFolderDataModule on tiny PNG folders written here: layouts, splits, conversions, both loader paths, errors."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import pytorch_lightning as pl
import torch
from PIL import Image
from torch import Tensor
from torch.utils.data import DataLoader

from litforge.core.errors import ConfigError, DataError
from litforge.data.image_folder import ImageFolderDataModule
from litforge.data.images import find_images, image_extensions, load_image_tensor
from litforge.data.memory import InMemoryLoader

CLASSES = ["cat", "dog", "emu"]


def write_image(path: Path, uid: int, size_hw: tuple[int, int] = (8, 8), mode: str = "RGB") -> np.ndarray:
    """A noise PNG whose first pixel holds `uid`, so every decoded image can be traced to its file.

    Returns the pixels as written (H, W[, C]) uint8, to compare with what the datamodule decodes."""
    rng = np.random.default_rng(uid)
    h, w = size_hw
    shape = (h, w) if mode in ("L", "P") else (h, w, len(mode))
    pixels = rng.integers(0, 256, shape, dtype=np.uint8)
    pixels.reshape(-1)[0] = uid
    path.parent.mkdir(parents=True, exist_ok=True)
    image = Image.fromarray(pixels, "L" if mode == "P" else mode)
    if mode == "P":
        image = image.convert("P")
    image.save(path)
    return pixels


def write_folder(
    root: Path, per_class: int = 10, start: int = 0, **kwargs: object
) -> dict[str, tuple[np.ndarray, int]]:
    """root/<class>/<uid>.png for each class; returns {path: (pixels, label)}."""
    written: dict[str, tuple[np.ndarray, int]] = {}
    uid = start
    for label, name in enumerate(CLASSES):
        for _ in range(per_class):
            path = root / name / f"{uid:03d}.png"
            written[str(path)] = (write_image(path, uid, **kwargs), label)  # type: ignore[arg-type]
            uid += 1
    return written


def as_chw(pixels: np.ndarray) -> Tensor:
    t = torch.from_numpy(pixels)
    return t.unsqueeze(0) if t.ndim == 2 else t.permute(2, 0, 1)


def check_splits_match_files(dm: ImageFolderDataModule, written: dict[str, tuple[np.ndarray, int]]) -> None:
    """Each decoded image and label is the one of the file listed for it by `split_samples`."""
    for split in ("train", "val", "test"):
        images, labels = dm.split_arrays(split)
        samples = dm.split_samples(split)
        assert len(images) == len(labels) == len(samples)
        for image, label, (path, sample_label) in zip(images, labels, samples, strict=True):
            pixels, written_label = written[path]
            assert int(label) == sample_label == written_label
            assert torch.equal(image, as_chw(pixels))


# ---- shape, layouts, splits ----------------------------------------------------------------------------------------
def test_flat_layout_shape_known_after_init_and_splits(tmp_path: Path) -> None:
    written = write_folder(tmp_path)
    (tmp_path / ".ipynb_checkpoints").mkdir()  # hidden folders are not classes
    (tmp_path / "notes.txt").write_text("not an image")
    dm = ImageFolderDataModule(root=str(tmp_path), val_fraction=0.2, test_fraction=0.2, batch_size=4)
    assert dm.input_shape == (3, 8, 8) and dm.num_classes == 3 and dm.class_names == CLASSES
    assert dm.describe()["class_names"] == CLASSES
    dm.setup()
    assert dm.in_memory is True
    sizes = {s: len(dm.split_samples(s)) for s in ("train", "val", "test")}
    assert sizes == {"train": 19, "val": 5, "test": 6}
    paths = [p for s in ("train", "val", "test") for p, _ in dm.split_samples(s)]
    assert sorted(paths) == sorted(written)  # a partition of all files
    check_splits_match_files(dm, written)

    loader = dm.train_dataloader()
    assert isinstance(loader, InMemoryLoader)
    images, labels = next(iter(loader))
    assert images.shape == (4, 3, 8, 8) and images.dtype == torch.uint8 and labels.dtype == torch.int64
    normalized, _ = dm.on_after_batch_transfer((dm.split_arrays("train")[0], labels), 0)
    assert normalized.mean(dim=(0, 2, 3)).abs().max() < 1e-4  # mean/std from the training split


def test_split_is_reproducible_from_split_seed(tmp_path: Path) -> None:
    write_folder(tmp_path)

    def split(seed: int) -> dict[str, list[tuple[str, int]]]:
        dm = ImageFolderDataModule(root=str(tmp_path), split_seed=seed, val_fraction=0.2)
        return {s: dm.split_samples(s) for s in ("train", "val", "test")}

    assert split(0) == split(0)
    assert split(0)["test"] != split(1)["test"] and split(0)["val"] != split(1)["val"]


def test_split_layout_uses_the_given_folders(tmp_path: Path) -> None:
    written = write_folder(tmp_path / "train", per_class=4)
    written |= write_folder(tmp_path / "val", per_class=2, start=100)
    written |= write_folder(tmp_path / "test", per_class=1, start=200)
    shutil.rmtree(tmp_path / "val" / "emu")  # a class may be missing from val or test
    dm = ImageFolderDataModule(root=str(tmp_path), val_fraction=0.5, test_fraction=0.5)
    assert dm.class_names == CLASSES
    assert [p for p, _ in dm.split_samples("train")] == sorted(str(p) for p in (tmp_path / "train").rglob("*.png"))
    assert [p for p, _ in dm.split_samples("val")] == sorted(str(p) for p in (tmp_path / "val").rglob("*.png"))
    assert len(dm.split_samples("test")) == 3
    written = {k: v for k, v in written.items() if "/val/emu/" not in k}
    check_splits_match_files(dm, written)


def test_split_layout_without_val_and_test_carves_them_from_train(tmp_path: Path) -> None:
    write_folder(tmp_path / "train", per_class=10)
    dm = ImageFolderDataModule(root=str(tmp_path), val_fraction=0.25, test_fraction=0.2)
    sizes = [len(dm.split_samples(s)) for s in ("train", "val", "test")]
    assert sizes == [18, 6, 6]


# ---- conversions ---------------------------------------------------------------------------------------------------
def test_resize_to_image_size(tmp_path: Path) -> None:
    for i, size in enumerate([(10, 12), (7, 9), (12, 12)]):
        write_image(tmp_path / CLASSES[i % 2] / f"{i}.png", i, size_hw=size)
    dm = ImageFolderDataModule(root=str(tmp_path), image_size=6, val_fraction=0.0, test_fraction=0.0)
    assert dm.input_shape == (3, 6, 6)
    assert dm.split_arrays("train")[0].shape == (3, 3, 6, 6)
    rect = ImageFolderDataModule(root=str(tmp_path), image_size=[4, 5], val_fraction=0.0, test_fraction=0.0)
    assert rect.input_shape == (3, 4, 5) and rect.split_arrays("train")[0].shape == (3, 3, 4, 5)


def test_channels_from_first_image_and_conversion(tmp_path: Path) -> None:
    grey = tmp_path / "grey"
    write_folder(grey, per_class=2, mode="L")
    assert ImageFolderDataModule(root=str(grey)).input_shape == (1, 8, 8)
    as_rgb = ImageFolderDataModule(root=str(grey), channels=3, val_fraction=0.0, test_fraction=0.0)
    images = as_rgb.split_arrays("train")[0]
    assert images.shape == (6, 3, 8, 8) and torch.equal(images[:, 0], images[:, 1])

    mixed_colour = tmp_path / "colour"  # RGB, RGBA and palette images are all colour: no error
    write_image(mixed_colour / "cat" / "a.png", 1, mode="RGB")
    write_image(mixed_colour / "cat" / "b.png", 2, mode="RGBA")
    write_image(mixed_colour / "dog" / "c.png", 3, mode="P")
    dm = ImageFolderDataModule(root=str(mixed_colour), val_fraction=0.0, test_fraction=0.0)
    assert dm.input_shape == (3, 8, 8) and dm.split_arrays("train")[0].shape == (3, 3, 8, 8)
    as_grey = ImageFolderDataModule(root=str(mixed_colour), channels=1, val_fraction=0.0, test_fraction=0.0)
    assert as_grey.split_arrays("train")[0].shape == (3, 1, 8, 8)


def test_16_bit_grey_keeps_its_range(tmp_path: Path) -> None:
    path = tmp_path / "deep.png"
    Image.fromarray((np.arange(64, dtype=np.uint16) * 1000).reshape(8, 8)).save(path)  # opens as mode I;16
    image = load_image_tensor(str(path), channels=1)
    assert image.shape == (1, 8, 8) and image.flatten()[:4].tolist() == [0, 3, 7, 11]  # value >> 8, not clipped


def test_load_image_tensor_matches_training(tmp_path: Path) -> None:
    written = write_folder(tmp_path, per_class=2, size_hw=(6, 10))
    dm = ImageFolderDataModule(root=str(tmp_path), val_fraction=0.0, test_fraction=0.0)
    images, _ = dm.split_arrays("train")
    for image, (path, _) in zip(images, dm.split_samples("train"), strict=True):
        assert torch.equal(load_image_tensor(path, 3), image)
        # what predict.py does: the datamodule's own shape (here the native size, so no resampling)
        assert torch.equal(load_image_tensor(path, dm.input_shape[0], dm.input_shape[1:]), image)
    path = next(iter(written))
    grey = load_image_tensor(path, channels=1, image_size=4)
    assert grey.shape == (1, 4, 4) and grey.dtype == torch.uint8
    assert load_image_tensor(path, channels=3, image_size=[3, 5]).shape == (3, 3, 5)
    with pytest.raises(ConfigError, match="data.channels"):
        load_image_tensor(path, channels=2)


def test_predict_finds_exactly_the_files_training_reads(tmp_path: Path) -> None:
    """find_images (predict.py input=<folder>) and the datamodule decide alike which files are images."""
    assert {".png", ".jpg", ".webp", ".tif", ".tiff"} <= set(image_extensions()) and ".gif" not in image_extensions()
    pixels = np.full((8, 8, 3), 7, dtype=np.uint8)
    names = ["a.png", "b.JPG", "c.jpeg", "d.webp", "e.tif", "f.TIFF", "g.bmp", "h.ppm", "i.gif", "j.txt", "k.png.bak"]
    for name in CLASSES:
        for file in names:
            fmt = {".gif": "GIF", ".txt": "PNG", ".bak": "PNG"}.get(Path(file).suffix.lower())
            (tmp_path / name).mkdir(exist_ok=True)
            Image.fromarray(pixels).save(tmp_path / name / f"{name}_{file}", format=fmt)
    (tmp_path / ".ipynb_checkpoints").mkdir()  # hidden folders are neither classes nor inputs
    Image.fromarray(pixels).save(tmp_path / ".ipynb_checkpoints" / "copy.png")
    dm = ImageFolderDataModule(root=str(tmp_path), val_fraction=0.0, test_fraction=0.0)
    trained = [path for path, _ in dm.split_samples("train")]
    assert len(trained) == 3 * 8  # the .gif, .txt and .png.bak files are not images to torchvision's ImageFolder
    assert [str(p) for p in find_images(tmp_path)] == trained  # the same files, in the same order
    assert find_images(tmp_path / "cat" / "cat_i.gif") == [tmp_path / "cat" / "cat_i.gif"]  # a named file is taken
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no images"):
        find_images(tmp_path / "empty")
    with pytest.raises(DataError, match="does not exist"):
        find_images(tmp_path / "missing")


# ---- streaming -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("num_workers", [0, 1])
def test_streaming_dataloader_path(tmp_path: Path, num_workers: int) -> None:
    written = write_folder(tmp_path, per_class=6)
    dm = ImageFolderDataModule(
        root=str(tmp_path),
        batch_size=4,
        num_workers=num_workers,
        max_in_memory_mb=0,
        val_fraction=0.2,
        test_fraction=0.2,
    )
    dm.setup()
    assert dm.in_memory is False
    loader = dm.train_dataloader()
    assert isinstance(loader, DataLoader)
    batches = list(loader)
    images = torch.cat([b[0] for b in batches])
    labels = torch.cat([b[1] for b in batches])
    assert images.dtype == torch.uint8 and images.shape[1:] == (3, 8, 8) and labels.dtype == torch.int64
    assert len(images) == len(dm.split_samples("train")) and batches[0][0].shape[0] == 4
    traced = sorted(int(i.flatten()[0]) for i in images)  # the first pixel is each file's uid
    assert traced == sorted(int(Path(p).stem) for p, _ in dm.split_samples("train"))
    assert isinstance(dm.val_dataloader(), DataLoader) and isinstance(dm.test_dataloader(), DataLoader)
    check_splits_match_files(dm, written)  # split_arrays decodes on demand
    normalized, _ = dm.on_after_batch_transfer(batches[0], 0)
    assert normalized.dtype == torch.float32 and normalized.shape == (4, 3, 8, 8)


def test_streaming_reports_mixed_sizes_when_reached(tmp_path: Path) -> None:
    write_folder(tmp_path, per_class=2)
    write_image(tmp_path / "dog" / "zz_big.png", 99, size_hw=(9, 8))
    dm = ImageFolderDataModule(
        root=str(tmp_path), max_in_memory_mb=0, mean=[0.5] * 3, std=[0.25] * 3, val_fraction=0.0, test_fraction=0.0
    )
    dm.setup()  # streaming does not decode everything up front
    with pytest.raises(DataError, match="data.image_size=8"):
        list(dm.train_dataloader())


class _TinyNet(pl.LightningModule):
    """The smallest classifier that lets a Trainer drive the datamodule's loaders."""

    def __init__(self, n_in: int, n_classes: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(n_in, n_classes)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        images, labels = batch
        return torch.nn.functional.cross_entropy(self.linear(images.flatten(1)), labels)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        images, labels = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.linear(images.flatten(1)), labels))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("max_in_memory_mb", [256.0, 0.0])
def test_trainer_fits_on_both_paths(tmp_path: Path, max_in_memory_mb: float) -> None:
    write_folder(tmp_path / "images", per_class=4, mode="L")
    dm = ImageFolderDataModule(
        root=str(tmp_path / "images"), batch_size=4, max_in_memory_mb=max_in_memory_mb, augment=True
    )
    trainer = pl.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(tmp_path),
    )
    trainer.fit(_TinyNet(64, dm.num_classes), datamodule=dm)
    assert trainer.global_step == 3  # 12 images - 2 test - 1 val = 9 train → 3 batches of ≤4
    assert dm.in_memory is (max_in_memory_mb > 0)


# ---- errors --------------------------------------------------------------------------------------------------------
def test_missing_root(tmp_path: Path) -> None:
    root = tmp_path / "nope"
    with pytest.raises(DataError, match="does not exist") as info:
        ImageFolderDataModule(root=str(root))
    assert str(root) in str(info.value) and str(root / "cat" / "001.png") in str(info.value)


def test_root_without_class_folders(tmp_path: Path) -> None:
    (tmp_path / "loose.png").write_bytes(b"")
    with pytest.raises(DataError, match="no class sub-folders"):
        ImageFolderDataModule(root=str(tmp_path))


def test_class_folders_without_any_image(tmp_path: Path) -> None:
    for name in CLASSES:
        (tmp_path / name).mkdir()
    (tmp_path / "cat" / "readme.txt").write_text("hi")
    with pytest.raises(DataError, match="no images"):
        ImageFolderDataModule(root=str(tmp_path))


def test_one_empty_class_folder_is_named(tmp_path: Path) -> None:
    write_folder(tmp_path, per_class=2)
    (tmp_path / "yak").mkdir()
    with pytest.raises(DataError, match="no images") as info:
        ImageFolderDataModule(root=str(tmp_path))
    assert str(info.value).startswith(f"class folder(s) {tmp_path / 'yak'} have no images")


def test_mixed_sizes_without_image_size(tmp_path: Path) -> None:
    write_image(tmp_path / "cat" / "a.png", 1, size_hw=(32, 32))
    write_image(tmp_path / "dog" / "b.png", 2, size_hw=(40, 30))
    dm = ImageFolderDataModule(root=str(tmp_path), val_fraction=0.0, test_fraction=0.0)
    with pytest.raises(DataError, match="different sizes") as info:
        dm.setup()
    message = str(info.value)
    assert "a.png: 32x32" in message and "b.png: 40x30" in message and "data.image_size=32" in message
    ImageFolderDataModule(root=str(tmp_path), image_size=32).setup()  # the suggested fix works


def test_mixed_modes_without_channels(tmp_path: Path) -> None:
    write_image(tmp_path / "cat" / "a.png", 1, mode="L")
    write_image(tmp_path / "dog" / "b.png", 2, mode="RGB")
    dm = ImageFolderDataModule(root=str(tmp_path), val_fraction=0.0, test_fraction=0.0)
    with pytest.raises(DataError, match="data.channels=3") as info:
        dm.setup()
    assert "a.png" in str(info.value) and "b.png" in str(info.value)
    ImageFolderDataModule(root=str(tmp_path), channels=3).setup()  # the suggested fix works


def test_unreadable_image_is_named(tmp_path: Path) -> None:
    write_folder(tmp_path, per_class=2)
    bad = tmp_path / "dog" / "zz_broken.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n this is not really a png")
    dm = ImageFolderDataModule(root=str(tmp_path))
    with pytest.raises(DataError, match="not a readable image") as info:
        dm.setup()
    assert str(bad) in str(info.value)
    truncated = tmp_path / "cat" / "000.png"  # the first image: its header is read in __init__
    truncated.write_bytes(b"garbage")
    with pytest.raises(DataError, match="not a readable image") as info:
        ImageFolderDataModule(root=str(tmp_path))
    assert str(truncated) in str(info.value)


def test_layout_mistakes(tmp_path: Path) -> None:
    write_folder(tmp_path / "train", per_class=1)
    write_folder(tmp_path / "valid", per_class=1)
    with pytest.raises(DataError, match="rename it to val"):
        ImageFolderDataModule(root=str(tmp_path))
    (tmp_path / "valid").rename(tmp_path / "val")
    write_image(tmp_path / "val" / "yak" / "y.png", 5)
    with pytest.raises(DataError, match="yak"):
        ImageFolderDataModule(root=str(tmp_path))
    only_test = tmp_path / "only_test"
    write_folder(only_test / "test", per_class=1)
    with pytest.raises(DataError, match="no train/ folder"):
        ImageFolderDataModule(root=str(only_test))


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"image_size": 0}, "data.image_size"),
        ({"image_size": [1, 2, 3]}, "data.image_size"),
        ({"channels": 4}, "data.channels"),
        ({"test_fraction": 1.0}, "data.test_fraction"),
        ({"mean": [0.5]}, "data.mean"),
    ],
)
def test_config_mistakes(tmp_path: Path, kwargs: dict[str, object], key: str) -> None:
    write_folder(tmp_path, per_class=1)
    with pytest.raises(ConfigError, match=key):
        ImageFolderDataModule(root=str(tmp_path), **kwargs)  # type: ignore[arg-type]


# ---- data.decoder ----------------------------------------------------------------------------------------------------
def write_jpegs(root: Path, per_class: int, size_hw: tuple[int, int], mode: str = "RGB") -> None:
    """Smooth noise JPEGs (quality 90), so the decoders' IDCT and chroma upsampling are exercised."""
    rng = np.random.default_rng(0)
    for name in CLASSES:
        for i in range(per_class):
            ramp = np.linspace(0, 60, size_hw[1])[None, :]
            pixels = rng.normal(128, 50, size_hw) + ramp
            pixels = (
                np.stack([pixels, pixels[::-1], ramp.repeat(size_hw[0], 0)], -1) if mode == "RGB" else pixels
            ).clip(0, 255)
            path = root / name / f"{i}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels.astype(np.uint8), mode).save(path, quality=90)


@pytest.mark.parametrize("max_in_memory_mb", [256.0, 0.0])
def test_torchvision_and_pil_decoders_give_the_same_tensors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_in_memory_mb: float
) -> None:
    """Tolerance: 0 at the native size (PIL and torchvision both decode with libjpeg-turbo, same settings), at most
    1 grey level per pixel after a resize (torchvision's antialiased bilinear filter follows PIL's)."""
    write_jpegs(tmp_path / "rgb", per_class=3, size_hw=(20, 24))
    write_jpegs(tmp_path / "grey", per_class=2, size_hw=(20, 24), mode="L")
    for folder, image_size, tolerance in (("rgb", None, 0), ("grey", None, 0), ("rgb", [11, 9], 1)):

        def arrays(decoder: str, folder: str = folder, image_size: list[int] | None = image_size) -> Tensor:
            dm = ImageFolderDataModule(
                root=str(tmp_path / folder),
                image_size=image_size,
                decoder=decoder,
                max_in_memory_mb=max_in_memory_mb,
                val_fraction=0.0,
                test_fraction=0.0,
            )
            return dm.split_arrays("train")[0]

        pil = arrays("pil")
        with monkeypatch.context() as patch:  # prove the torchvision arm never reaches PIL's decoder
            patch.setattr("litforge.data.image_folder.open_image", lambda path: pytest.fail(f"PIL decoded {path}"))
            fast = arrays("torchvision")
        assert fast.dtype == pil.dtype == torch.uint8 and fast.shape == pil.shape
        assert (fast.int() - pil.int()).abs().max() <= tolerance, folder
        path = next((tmp_path / folder).rglob("*.jpg"))  # predict.py's reader follows the same decoder
        size = image_size or (20, 24)
        assert (
            load_image_tensor(path, pil.shape[1], size).int()
            - load_image_tensor(path, pil.shape[1], size, decoder="pil").int()
        ).abs().max() <= tolerance


def test_torchvision_decoder_keeps_the_checks(tmp_path: Path) -> None:
    write_jpegs(tmp_path, per_class=2, size_hw=(8, 8))
    Image.fromarray(np.zeros((9, 8, 3), np.uint8)).save(tmp_path / "dog" / "zz_big.jpg")
    dm = ImageFolderDataModule(root=str(tmp_path), val_fraction=0.0, test_fraction=0.0)
    with pytest.raises(DataError, match="data.image_size=8"):  # mixed sizes: still one clear line
        dm.setup()
    (tmp_path / "dog" / "zz_big.jpg").write_bytes((tmp_path / "dog" / "0.jpg").read_bytes()[:40])  # truncated
    dm = ImageFolderDataModule(root=str(tmp_path), val_fraction=0.0, test_fraction=0.0)
    with pytest.raises(DataError, match="not a readable image") as info:
        dm.setup()
    assert "zz_big.jpg" in str(info.value)
    with pytest.raises(ConfigError, match="data.decoder"):
        ImageFolderDataModule(root=str(tmp_path), decoder="cv2")


# ---- data.max_in_memory_mb -------------------------------------------------------------------------------------------
def test_in_memory_auto_follows_the_available_host_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from litforge.data import placement

    assert placement.host_memory_available() > 2**20  # read from the real machine
    write_folder(tmp_path, per_class=4)  # 12 images x 3x8x8 = 2304 bytes decoded
    for available, expected in ((4 * 2304 + 4, True), (4 * 2304 - 4, False)):  # the limit is a quarter of it
        monkeypatch.setattr(placement, "host_memory_available", lambda available=available: available)
        dm = ImageFolderDataModule(root=str(tmp_path), mean=[0.5] * 3, std=[0.25] * 3)  # default: auto
        dm.setup()
        assert dm.in_memory is expected
    monkeypatch.setattr(placement, "host_memory_available", lambda: 4 * 2304 + 4)
    assert placement.hold_in_memory("auto", 2304, ranks_per_node=1)
    assert not placement.hold_in_memory("auto", 2304, ranks_per_node=2)  # DDP ranks each hold a copy
    assert placement.hold_in_memory(1, 2**20) and not placement.hold_in_memory(1, 2**20 + 1)
    for bad in ("lots", -1, True):
        with pytest.raises(ConfigError, match="data.max_in_memory_mb"):
            ImageFolderDataModule(root=str(tmp_path), max_in_memory_mb=bad)  # type: ignore[arg-type]
