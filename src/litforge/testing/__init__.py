"""The contract kit: plain functions a project's pytest tests call on its own datamodule, net and task.

    from litforge.testing import check_all, compose

    def test_my_options_keep_litforge_contracts(tmp_path):
        check_all(compose(["data=mydata", "model=mynet", "task=mytask"], config_dir="conf"), tmp_path)

Each check builds what `litforge train` would build from the composed config (the datamodule, then the task from its
`describe()`), runs the real thing at tiny cost (a few CPU steps, a real checkpoint file, the predict and export jobs'
own functions, two real gloo ranks), and raises AssertionError with one line saying what broke. litforge's own tests
run this same kit over every shipped option (tests/test_contracts.py). docs/api.md lists what each check promises.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from litforge.testing.checks import (
    check_checkpoint_round_trip,
    check_describe_sizes_net,
    check_export_contract,
    check_one_step_trains,
    check_predict_contract,
    check_resume_mid_epoch_exact,
)
from litforge.testing.compose import compose
from litforge.testing.ddp import check_ddp_matches_single_process

__all__ = [
    "check_all",
    "check_checkpoint_round_trip",
    "check_ddp_matches_single_process",
    "check_describe_sizes_net",
    "check_export_contract",
    "check_one_step_trains",
    "check_predict_contract",
    "check_resume_mid_epoch_exact",
    "compose",
]


def check_all(cfg: DictConfig, tmp_path: str | Path) -> None:
    """Every check of the kit, cheapest first; the first that fails raises."""
    tmp = Path(tmp_path)
    check_describe_sizes_net(cfg)
    check_one_step_trains(cfg)
    check_checkpoint_round_trip(cfg, tmp / "round_trip")
    check_predict_contract(cfg, tmp / "predict")
    check_export_contract(cfg, tmp / "export")
    check_resume_mid_epoch_exact(cfg, tmp / "resume")
    check_ddp_matches_single_process(cfg, tmp / "ddp")
