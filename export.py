"""Export a checkpoint: `python export.py ckpt_path=<run>/checkpoints/last.ckpt` (see `python export.py --help`)."""

import hydra
from omegaconf import DictConfig

from litforge import cli


@hydra.main(config_path="conf", config_name="export", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from litforge.export import export

    result = cli.run_job(export, cfg)
    cli.print_summary("export", {k: v for k, v in result.items() if k != "report"})


if __name__ == "__main__":
    main()
