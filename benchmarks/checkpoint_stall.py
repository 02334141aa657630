"""Training stall per checkpoint, synchronous vs `checkpoint_async=true`, for a checkpoint of a few hundred MB.

The stall is what the training thread waits for: the whole atomic write (serialise, fsync, rename) when synchronous;
the point-in-time clone of the tensors plus handing the write to the background thread when asynchronous. The
background write's own time is printed beside it (it overlaps training). Arms interleave; medians of `--repeats`.

    python benchmarks/checkpoint_stall.py --mb 300 --repeats 3
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch

from common import interleave, median, print_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=300, help="checkpoint size in MB (float32 tensors of 4 MB)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    from pytorch_lightning.plugins.io import AsyncCheckpointIO

    from litforge.checkpointing.io import AtomicCheckpointIO

    checkpoint = {"state_dict": {f"w{i}": torch.randn(1 << 20) for i in range(args.mb // 4)}}
    folder = Path(tempfile.mkdtemp(prefix="litforge_stall_"))
    sync_io, async_io = AtomicCheckpointIO(), AsyncCheckpointIO(AtomicCheckpointIO())
    background: list[float] = []

    def sync_save() -> float:
        start = time.perf_counter()
        sync_io.save_checkpoint(checkpoint, folder / "sync.ckpt")
        return time.perf_counter() - start

    def async_save() -> float:
        start = time.perf_counter()
        async_io.save_checkpoint(checkpoint, folder / "async.ckpt")
        stall = time.perf_counter() - start
        async_io.teardown()  # wait here, outside the stall, so the arms do not overlap
        background.append(time.perf_counter() - start)
        return stall

    results = interleave({"sync": sync_save, "async": async_save}, repeats=args.repeats)
    sync_s, async_s = median(results["sync"]), median(results["async"])
    print_table(
        f"checkpoint stall, {args.mb} MB, median of {args.repeats}",
        ["arm", "stall s", "write s", "ratio"],
        [
            ["sync", f"{sync_s:.2f}", f"{sync_s:.2f}", "1.00"],
            ["async", f"{async_s:.2f}", f"{median(background):.2f}", f"{async_s / sync_s:.2f}"],
        ],
    )
    for file in folder.iterdir():
        file.unlink()
    folder.rmdir()


if __name__ == "__main__":
    main()
