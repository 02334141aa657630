"""Sample text from a language model: `python generate.py ckpt_path=<ckpt> prompt="def "` (see `--help`)."""

from litforge.cli.main import main

if __name__ == "__main__":
    main("generate")
