"""Reading one image file exactly as training reads it, for the image_folder datamodule and for prediction alike.

Why one module: an image a user predicts on must become the very tensor the net saw in training (same decoder,
same channel and size conversion, same 16-bit handling), and a folder handed to `predict.py` must yield the very
files `data=image_folder` would train on (torchvision's ImageFolder suffixes). Both sides import these functions
instead of keeping their own copies that drift apart.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torchvision.datasets.folder import IMG_EXTENSIONS
from torchvision.io import decode_jpeg
from torchvision.transforms.v2 import functional as F

from litforge.core.errors import ConfigError, DataError

# PIL modes holding one value per pixel; every other mode (RGB, RGBA, P, CMYK, YCbCr, ...) becomes 3 channels
GREY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16L", "I;16B", "I;16N", "F"})
# what PIL raises for a file it cannot read: missing, truncated, not an image, or a decompression bomb
UNREADABLE = (OSError, ValueError, SyntaxError, Image.DecompressionBombError)
# `data.decoder`: torchvision = torchvision.io.decode_jpeg for JPEG files, PIL for every other format; pil = PIL only
DECODERS = ("torchvision", "pil")
JPEG_MAGIC = b"\xff\xd8\xff"  # every JPEG file (JFIF, Exif, raw) starts with SOI followed by a marker


def image_extensions() -> tuple[str, ...]:
    """The file endings torchvision's ImageFolder treats as images (.jpg, .png, .webp, .tif, ...).

    Read from torchvision itself, so training and prediction follow whatever the installed torchvision accepts.
    """
    return tuple(IMG_EXTENSIONS)


def find_images(path: str | os.PathLike[str]) -> list[Path]:
    """The image files at `path`: the file itself, or every image file under a folder.

    A folder is walked as torchvision's `make_dataset` walks a class folder (sorted, symbolic links followed, the
    endings of :func:`image_extensions` in any letter case), leaving out hidden folders (`.ipynb_checkpoints`,
    `.git`) as the class scan does. A file named explicitly is taken whatever its ending; reading it decides.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"input {path} does not exist: pass input=<an image file or a folder of images>")
    if path.is_file():
        return [path]
    extensions = image_extensions()
    files = []
    for folder, dirs, names in os.walk(path, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files += [Path(folder) / name for name in sorted(names) if name.lower().endswith(extensions)]
    if not files:
        raise DataError(f"no images ({', '.join(image_extensions())}) found under {path}")
    return files


def mode_channels(mode: str) -> int:
    """Channels a PIL mode becomes when channels are not given: grey modes 1, everything else 3 (RGB)."""
    return 1 if mode in GREY_MODES else 3


def parse_image_size(image_size: int | Sequence[int] | None) -> tuple[int, int] | None:
    """`32` → (32, 32); `[h, w]` → (h, w); None stays None (keep the native size). Accepts Hydra's ListConfig."""
    if image_size is None:
        return None
    if isinstance(image_size, int) and not isinstance(image_size, bool):
        size = [image_size, image_size]
    elif isinstance(image_size, (str, bool)):
        size = []
    else:
        try:
            size = list(image_size)
        except TypeError:
            size = []
    if len(size) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size):
        raise ConfigError(
            f"data.image_size={image_size!r} must be a positive int (square images, e.g. 32), a "
            f"[height, width] pair (e.g. [32,48]) or null (keep the images' own size)"
        )
    return size[0], size[1]


def check_channels(channels: int | None) -> None:
    """Only grey (1) and RGB (3) exist as conversions; anything else is a config mistake."""
    if channels is not None and (isinstance(channels, bool) or channels not in (1, 3)):
        raise ConfigError(
            f"data.channels={channels!r} is not supported; use 1 (grey), 3 (RGB) or null (from the first image)"
        )


def check_decoder(decoder: str) -> None:
    if decoder not in DECODERS:
        raise ConfigError(
            f"data.decoder={decoder!r} is not supported; use torchvision (faster JPEG decoding, PIL for "
            f"other formats) or pil"
        )


def _unreadable(path: str, err: Exception) -> DataError:
    return DataError(f"{path} is not a readable image ({type(err).__name__}: {err}); delete or replace it")


def open_image(path: str) -> Image.Image:
    """Decode an image file completely, or raise a DataError that names the file."""
    try:
        with Image.open(path) as img:
            img.load()  # decode now: a truncated file must fail here, naming the file, not later in a transform
            return img
    except UNREADABLE as err:
        raise _unreadable(path, err) from err


def read_header(path: str) -> tuple[tuple[int, int], str]:
    """Size (h, w) and mode from the header alone; no pixel is decoded."""
    try:
        with Image.open(path) as img:
            return (img.height, img.width), img.mode
    except UNREADABLE as err:
        raise _unreadable(path, err) from err


def image_to_tensor(img: Image.Image, channels: int, size_hw: tuple[int, int] | None) -> Tensor:
    """PIL image → uint8 (C, H, W): converted to grey (1) or RGB (3, alpha dropped), then resized to `size_hw`
    (bilinear, no aspect-ratio preserving crop) when it differs. 16-bit grey (PNG, TIFF) keeps its top 8 bits;
    PIL's own conversion would clip every value above 255 to white."""
    if img.mode.startswith("I;16") or img.mode == "I":
        img = Image.fromarray((np.array(img).astype(np.int64) >> 8).clip(0, 255).astype(np.uint8), "L")
    img = img.convert("L" if channels == 1 else "RGB")
    if size_hw is not None and (img.height, img.width) != size_hw:
        img = img.resize((size_hw[1], size_hw[0]), Image.Resampling.BILINEAR)
    array = torch.from_numpy(np.array(img, dtype=np.uint8))
    return (array.unsqueeze(0) if array.ndim == 2 else array.permute(2, 0, 1)).contiguous()


def resize_tensor(image: Tensor, size_hw: tuple[int, int] | None) -> Tensor:
    """uint8 (C, H, W) resized to `size_hw` with torchvision's antialiased bilinear filter, which follows PIL's
    (the two differ by at most 1 grey level per pixel, tests/test_image_folder.py)."""
    if size_hw is None or tuple(image.shape[1:]) == size_hw:
        return image

    return F.resize(image, list(size_hw), interpolation=F.InterpolationMode.BILINEAR, antialias=True).contiguous()


def decode_jpeg_file(path: str) -> Tensor | None:
    """A JPEG file → uint8 (C, H, W) in its own channels (1 grey, 3 colour, 4 CMYK) by torchvision's libjpeg-turbo
    decoder; None when the file is not a JPEG (PIL reads those).

    Why beside PIL: `benchmarks/loader_throughput.py` measured torchvision's decoder 2-4x faster per image than PIL's
    open + load + convert + numpy, with the same libjpeg-turbo pixels (max difference 0 on the benchmark's images).
    torchvision 0.29 deprecated its decoders for TorchCodec's (torchcodec >= 0.16, not a litforge dependency yet):
    its warning is silenced here, and this function is the one place to switch.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as err:  # missing or unreadable file
        raise _unreadable(path, err) from err
    if not data.startswith(JPEG_MAGIC):
        return None
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", "The image decoding and encoding capabilities of TorchVision", DeprecationWarning
        )

        try:
            return decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        except RuntimeError as err:  # truncated or corrupt JPEG
            raise _unreadable(path, err) from err


def load_image_tensor(
    path: str | os.PathLike[str],
    channels: int,
    image_size: int | Sequence[int] | None = None,
    decoder: str = "torchvision",
) -> Tensor:
    """Any image file → uint8 (C, H, W), converted exactly as in training.

    Prediction code should pass the datamodule's own shape, `channels=dm.input_shape[0]` and
    `image_size=dm.input_shape[1:]`: training either resized every image to that size or kept a native size that
    every image shares, so the result always fits the net (a same-size image is not resampled).
    """
    check_channels(channels)
    check_decoder(decoder)
    size_hw = parse_image_size(image_size)
    if decoder == "torchvision":
        image = decode_jpeg_file(os.fspath(path))
        if image is not None and image.shape[0] == channels:  # otherwise PIL converts (grey <-> RGB, CMYK)
            return resize_tensor(image, size_hw)
    return image_to_tensor(open_image(os.fspath(path)), channels, size_hw)
