"""Predict a checkpoint: `python predict.py ckpt_path=<run>/checkpoints/last.ckpt` (see `python predict.py --help`)."""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from litforge import cli
from litforge.help import answer_help


@hydra.main(config_path="conf", config_name="predict", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from litforge.predict import predict

    cli.print_summary("predict", cli.run_job(predict, cfg))


if __name__ == "__main__":
    answer_help("predict", Path(__file__).parent / "conf")  # `--help` alone: fast, without starting Hydra
    cli.prepare_command_line("predict")  # early checks (value types, log folder), resume=
    main()
