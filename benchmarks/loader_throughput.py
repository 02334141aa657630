"""Loader throughput (samples/s) of every way litforge can feed images, beside ResNet-18's training-step appetite.

    python benchmarks/loader_throughput.py                       # 3000 JPEGs at 32 and 128 px, 3 repeats
    python benchmarks/loader_throughput.py --images 1000 --px 32 --repeats 1   # a quick look

It writes `--images` JPEGs (smooth colour gradients plus noise, quality 90, 10 class folders) per size into a temp
folder, then measures one full pass over them (batch 64, loader start-up included: that is what an epoch costs
without persistent workers) for:

- **in-memory**: `data=image_folder` under `data.max_in_memory_mb` (decoded once in `setup`, then sliced from
  tensors by litforge's InMemoryLoader); the one-off decode time is its own column;
- **streamed image folder**: `data=image_folder` over `max_in_memory_mb` (torchdata's StatefulDataLoader over
  files), `data.num_workers` 0/1/2 × `data.decoder` pil / torchvision;
- **LitData streaming**: `litdata.optimize` of the same JPEG bytes into shards, then `StreamingDataset` +
  `StreamingDataLoader` with 0/1/2 workers, decoding with torchvision. litforge's own `data=streaming` datamodule
  (built in parallel) will wrap exactly these two classes: swap `litdata_arm` for its `train_dataloader()` then.

and ResNet-18's appetite: samples/s of forward + backward + SGD step (litforge's `model=resnet`, batch 32, fp32)
on this CPU at each size, with the FLOPs per sample (torch's FlopCounterMode) to say what a GPU would consume.
Arms are interleaved (order reversed every other repeat) and figures are medians over repeats. The "× appetite"
columns are loader samples/s ÷ training samples/s: at ≥ 1 the loader keeps up with the step (the GPU one is an
estimate from FLOPs at an assumed achieved rate, GPU_TFLOPS, not a measurement).
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from common import interleave, median, print_table, quiet  # also puts src/ on sys.path
from litforge.data.image_folder import ImageFolderDataModule

BATCH = 64
CLASSES = 10
GPU_TFLOPS = 100.0  # an assumed *achieved* training rate on one modern GPU (~10 % of an H100/H200's dense bf16 peak)


def write_jpegs(root: Path, n: int, px: int, seed: int = 0) -> int:
    """`n` JPEGs of px × px in root/<class>/; returns their total bytes."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:px, 0:px].astype(np.float32) / px
    total = 0
    for i in range(n):
        a, b, c = rng.uniform(0, 255, 3)
        base = np.stack([a * x + (255 - a) * y, b * (1 - x), c * (x + y) / 2], -1)
        pixels = (base + rng.normal(0, 16, (px, px, 3))).clip(0, 255).astype(np.uint8)
        path = root / f"c{i % CLASSES}" / f"{i:06d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(pixels).save(path, quality=90)
        total += path.stat().st_size
    return total


def image_folder(root: Path, **kwargs: Any) -> ImageFolderDataModule:
    """All images in the training split; mean/std given so streaming `setup` decodes nothing up front."""
    return ImageFolderDataModule(
        root=str(root), batch_size=BATCH, val_fraction=0.0, test_fraction=0.0, mean=[0.5] * 3, std=[0.25] * 3, **kwargs
    )


def one_pass(loader: Any) -> tuple[float, float, int]:
    """(seconds for the whole pass, seconds to the first batch, samples) over one epoch of `loader`."""
    start = time.perf_counter()
    first = None
    n = 0
    for images, _ in loader:
        if first is None:
            first = time.perf_counter() - start
        n += len(images)
    return time.perf_counter() - start, first or 0.0, n


def streamed_arm(root: Path, workers: int, decoder: str) -> tuple[float, float, int]:
    dm = image_folder(root, max_in_memory_mb=0, num_workers=workers, decoder=decoder)
    dm.setup()
    assert dm.in_memory is False
    return one_pass(dm.train_dataloader())


def in_memory_arm(dm: ImageFolderDataModule) -> tuple[float, float, int]:
    return one_pass(dm.train_dataloader())


class JpegShards:
    """LitData's StreamingDataset over the shards, decoding each sample's JPEG bytes with torchvision.

    A factory, not a subclass at import time, so `import litdata` (slow) happens only when the arm runs."""

    @staticmethod
    def dataset(shards: str) -> Any:
        import litdata

        class Decoded(litdata.StreamingDataset):
            def __getitem__(self, index: Any) -> tuple[torch.Tensor, int]:
                import warnings

                from torchvision.io import decode_jpeg

                item = super().__getitem__(index)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)
                    image = decode_jpeg(torch.frombuffer(bytearray(item["image"]), dtype=torch.uint8))
                return image, item["label"]

        return Decoded(shards, shuffle=True, seed=0)


def _shard_item(path: str) -> dict[str, Any]:
    """One sample for `litdata.optimize`: the JPEG file's bytes, untouched, and its class index."""
    return {"image": Path(path).read_bytes(), "label": int(Path(path).parent.name[1:])}


def optimize_shards(root: Path, out: Path) -> float:
    """Seconds `litdata.optimize` takes to pack the folder's JPEG bytes into shards at `out`."""
    import litdata

    files = sorted(str(p) for p in root.rglob("*.jpg"))
    start = time.perf_counter()
    litdata.optimize(
        fn=_shard_item,
        inputs=files,
        output_dir=str(out),
        chunk_bytes="64MB",
        num_workers=1,
        verbose=False,
        start_method="fork",
    )
    return time.perf_counter() - start


def litdata_arm(shards: Path, workers: int) -> tuple[float, float, int]:
    from litdata import StreamingDataLoader

    loader = StreamingDataLoader(JpegShards.dataset(str(shards)), batch_size=BATCH, num_workers=workers)
    return one_pass(loader)


class ResNetStep:
    """litforge's ResNet-18 (`model=resnet`) at px × px, fp32, SGD with momentum: built and warmed up once."""

    def __init__(self, px: int, batch: int) -> None:
        from torch.utils.flop_counter import FlopCounterMode

        from litforge.models.resnet import ResNet

        torch.manual_seed(0)
        self.net = ResNet(in_channels=3, image_size=(px, px), num_classes=CLASSES)
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)
        self.x = torch.randn(batch, 3, px, px)
        self.y = torch.randint(0, CLASSES, (batch,))
        with FlopCounterMode(display=False) as counter:
            self.net(self.x[:1])
        self.flops = float(counter.get_total_flops())  # forward FLOPs per sample
        self.step()  # warm-up: oneDNN picks its kernels

    def step(self) -> None:
        loss = torch.nn.functional.cross_entropy(self.net(self.x), self.y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()

    def samples_per_s(self, steps: int, threads: int) -> float:
        torch.set_num_threads(threads)
        try:
            start = time.perf_counter()
            for _ in range(steps):
                self.step()
            return steps * len(self.y) / (time.perf_counter() - start)
        finally:
            torch.set_num_threads(1)


def fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=3000, help="JPEGs per size")
    parser.add_argument("--px", type=int, nargs="+", default=[32, 128], help="image sides to test")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=2, help="timed ResNet-18 steps per repeat")
    parser.add_argument("--step-batch", type=int, default=32, help="batch of the timed ResNet-18 step")
    parser.add_argument("--threads", type=int, default=2, help="torch threads for the training step")
    parser.add_argument("--no-litdata", action="store_true", help="leave out the LitData arms")
    args = parser.parse_args()
    quiet()
    # loaders run with 1 torch thread, as DataLoader workers do: with 2 intra-op threads on a busy machine, the
    # main process's batch collation ran ~10x slower (OpenMP threads waiting on each other), which measured the
    # thread pool, not the loader. Only the ResNet-18 step uses --threads.
    torch.set_num_threads(1)
    load = os.getloadavg()
    print(
        f"{args.images} JPEGs per size, batch {BATCH}, {args.repeats} repeats, {os.cpu_count()} CPUs, load "
        f"average at start {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="litforge-loaderbench-"))
    try:
        for px in args.px:
            root = tmp / f"jpeg{px}"
            t0 = time.perf_counter()
            nbytes = write_jpegs(root, args.images, px)
            print(
                f"\n{px} px: wrote {args.images} JPEGs ({nbytes / 2**20:.1f} MB, "
                f"{nbytes / args.images / 1024:.1f} KB each) in {time.perf_counter() - t0:.1f} s"
            )
            in_memory = image_folder(root, max_in_memory_mb=1e9)
            t0 = time.perf_counter()
            in_memory.setup()
            decode_once = time.perf_counter() - t0
            assert in_memory.in_memory
            arms: dict[str, Any] = {"in-memory (decoded once)": lambda in_memory=in_memory: in_memory_arm(in_memory)}
            for decoder in ("pil", "torchvision"):
                for w in args.workers:
                    arms[f"streamed folder, {decoder}, workers {w}"] = lambda w=w, decoder=decoder, root=root: (
                        streamed_arm(root, w, decoder)
                    )
            pack_s = None
            if not args.no_litdata:
                shards = tmp / f"shards{px}"
                pack_s = optimize_shards(root, shards)
                for w in args.workers:
                    arms[f"LitData streaming, workers {w}"] = lambda w=w, shards=shards: litdata_arm(shards, w)
            resnet = ResNetStep(px, args.step_batch)
            arms["ResNet-18 training step"] = lambda resnet=resnet: (resnet.samples_per_s(args.steps, args.threads),)
            results = interleave(arms, args.repeats)

            appetite = median([r[0] for r in results.pop("ResNet-18 training step")])
            flops = resnet.flops
            base = median([r[2] / r[0] for r in results["streamed folder, pil, workers 0"]])
            gpu_rate = GPU_TFLOPS * 1e12 / (3 * flops)
            rows = []
            for name, runs in results.items():
                rate = median([n / s for s, _, n in runs])
                first = median([f for _, f, _ in runs])
                extra = ""
                if name.startswith("in-memory"):
                    extra = f"decode once: {decode_once:.1f} s"
                elif name.startswith("LitData") and pack_s is not None:
                    extra = f"optimize once: {pack_s:.1f} s"
                rows.append(
                    [
                        name,
                        fmt(rate),
                        f"{rate / base:.2f}",
                        f"{rate / appetite:.1f}",
                        f"{rate / gpu_rate:.2f}",
                        f"{first * 1e3:.0f}",
                        extra,
                    ]
                )
            rows.append(
                [
                    f"ResNet-18 train step, CPU {args.threads} threads, batch {args.step_batch}",
                    fmt(appetite),
                    "",
                    "1.0",
                    "",
                    "",
                    f"{flops / 1e9:.2f} GFLOP fwd/sample",
                ]
            )
            rows.append(
                [
                    f"ResNet-18 train step, GPU at {GPU_TFLOPS:.0f} TFLOP/s (estimate)",
                    fmt(gpu_rate),
                    "",
                    f"{gpu_rate / appetite:.0f}",
                    "1.00",
                    "",
                    "3 × fwd FLOPs per sample",
                ]
            )
            print_table(
                f"{px} px JPEGs ({args.images} images, {px}x{px} RGB)",
                [
                    "path",
                    "samples/s",
                    "× streamed pil w0",
                    "× CPU appetite",
                    "× GPU appetite (est.)",
                    "first batch ms",
                    "note",
                ],
                rows,
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load = os.getloadavg()
    print(f"\nload average at end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}")


if __name__ == "__main__":
    main()
