"""One-file checkpoints from the sharded checkpoints that `strategy=fsdp/tp/fsdp_tp` write.

Under `ModelParallelStrategy` every rank writes its own shards into a checkpoint *folder* (torch distributed
checkpoint format: `.metadata` + one file per rank), so saving never gathers the model on one process. Resuming
training reads that folder directly (`ckpt_path=<run>/checkpoints/last.ckpt`). For eval, predict and export the
shards are merged into an ordinary Lightning checkpoint with torch's own converter (`dcp_to_torch_save`); Lightning's
`consolidate_checkpoint` utility expects Fabric's layout and fails on Trainer checkpoints (`KeyError: 'model'`).

    python -m litforge.checkpointing.consolidate <run>/checkpoints/last.ckpt            # -> last.consolidated.ckpt
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from litforge.core.errors import CheckpointError

METADATA = ".metadata"  # torch.distributed.checkpoint's index of the shards
META = "meta.pt"  # Lightning's non-tensor checkpoint state, written by rank 0 beside the shards


def is_distributed_checkpoint(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / METADATA).is_file()


def consolidated_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(f"{path.stem}.consolidated.ckpt")


def consolidate(path: str | Path, output: str | Path | None = None) -> Path:
    """Merge the shards in folder `path` into one checkpoint file (default: `<name>.consolidated.ckpt` beside it).

    The result holds full tensors under the same keys as a single-process checkpoint (`state_dict`, `litforge`,
    `hyper_parameters`, ...), so `torch.load(weights_only=True)` and `restore_task` read it like any other.
    """
    if not is_distributed_checkpoint(path):
        raise CheckpointError(
            f"{path} is not a sharded checkpoint folder (no {METADATA} inside); "
            "pass the checkpoint folder a strategy=fsdp/tp run wrote, e.g. <run>/checkpoints/last.ckpt"
        )
    import torch.distributed.checkpoint.format_utils  # torch-free refusals; binds `torch` too

    out = Path(output) if output else consolidated_path(path)
    # write then rename: several ranks (or runs) may consolidate the same folder at once, none reads a partial file
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    torch.distributed.checkpoint.format_utils.dcp_to_torch_save(str(path), str(partial))
    shards = torch.load(partial, weights_only=True, map_location="cpu")
    # Lightning keeps everything but weights and optimizer state (loops, callbacks, hparams, litforge's entry) in
    # meta.pt; the optimizer shards are dropped: the merged file is for inference, resume from the folder itself.
    # map_location: meta.pt keeps tensors where the run had them (ModelCheckpoint's best score on the GPU), and a
    # GPU run's checkpoint must still evaluate, predict and export on a CPU-only machine
    meta = Path(path) / META
    checkpoint = torch.load(meta, weights_only=True, map_location="cpu") if meta.is_file() else {}
    checkpoint["state_dict"] = shards["state_dict"]
    torch.save(checkpoint, partial)
    os.replace(partial, out)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m litforge.checkpointing.consolidate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("checkpoint", help="a sharded checkpoint folder, e.g. <run>/checkpoints/last.ckpt")
    parser.add_argument("output", nargs="?", help="the file to write (default: <name>.consolidated.ckpt beside it)")
    args = parser.parse_args(argv)
    print(consolidate(args.checkpoint, args.output))


if __name__ == "__main__":
    main()
