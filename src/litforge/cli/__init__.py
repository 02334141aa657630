"""The command line: every root script's entry point, fast `--help`, the checks before Hydra starts, one error style."""
