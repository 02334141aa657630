"""Export a checkpoint to ONNX and int8: `python export.py ckpt_path=<ckpt>` (see `python export.py --help`)."""

from litforge.cli.main import main

if __name__ == "__main__":
    main("export")
