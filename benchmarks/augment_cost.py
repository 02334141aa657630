"""Cost of `data.augment` per training batch, and of `task.mix`: milliseconds per batch for each option.

    python benchmarks/augment_cost.py                      # CPU (and CUDA, where present)
    python benchmarks/augment_cost.py --batch 128 --shape 3 32 32

Why it exists: torchvision's v2 policies draw their random operation once per call, so litforge applies them image
by image (litforge.data.augment.PerImage); this measures what that loop costs against the vectorised `flip_crop`
and against MixUp/CutMix on the whole batch, on the batch's own device (where `on_after_batch_transfer` runs them).
Needs only torch, torchvision and `src/` on the path (no Hydra).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from litforge.data.augment import AUGMENTS, build_augment  # noqa: E402


def time_ms(fn, repeats: int, device: torch.device) -> float:
    """Median milliseconds of `fn()` over `repeats` calls, after two warm-up calls (synchronised on CUDA)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--shape", type=int, nargs=3, default=[1, 8, 8], metavar=("C", "H", "W"))
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    from torchvision.transforms import v2

    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    print(f"batch {args.batch} x {tuple(args.shape)}, uint8 images; ms per batch (median of {args.repeats})")
    print(f"| option | {' | '.join(d.type for d in devices)} |")
    print("|---|" + "---|" * len(devices))
    rows: dict[str, list[str]] = {}
    for device in devices:
        images = torch.randint(0, 256, (args.batch, *args.shape), dtype=torch.uint8, device=device)
        labels = torch.randint(0, 10, (args.batch,), device=device)
        floats = images.float() / 255
        for name in AUGMENTS[1:]:
            fn = build_augment(name)
            ms = time_ms(lambda fn=fn, images=images: fn(images), args.repeats, device)
            rows.setdefault(f"data.augment={name}", []).append(f"{ms:.2f}")
        for name, cls in (("mixup", v2.MixUp), ("cutmix", v2.CutMix)):
            mix = cls(alpha=0.2, num_classes=10)
            ms = time_ms(lambda mix=mix, floats=floats, labels=labels: mix(floats, labels), args.repeats, device)
            rows.setdefault(f"task.mix={name}", []).append(f"{ms:.2f}")
    for name, cells in rows.items():
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
