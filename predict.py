"""Predict with a checkpoint: `python predict.py ckpt_path=<ckpt> [input=<image or folder>]` (see `--help`)."""

from litforge.cli.main import main

if __name__ == "__main__":
    main("predict")
