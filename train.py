"""Train a model: `python train.py [group=option ...] [key=value ...]` (see `python train.py --help`)."""

from litforge.cli.main import main

if __name__ == "__main__":
    main("train")
