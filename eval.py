"""Evaluate a checkpoint: `python eval.py ckpt_path=<run>/checkpoints/last.ckpt` (see `python eval.py --help`)."""

from litforge.cli.main import main

if __name__ == "__main__":
    main("eval")
