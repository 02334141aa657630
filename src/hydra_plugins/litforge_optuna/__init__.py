"""litforge's Optuna sweeper for Hydra (`hydra/sweeper=litforge_optuna`), written against current Optuna.

Why not `hydra-optuna-sweeper`: its latest release (1.3.0) pins `optuna<3`, so installing it downgrades Optuna by
several major versions. This plugin uses only Optuna's stable ask/tell API, so it follows Optuna releases.

Hydra imports every module of the `hydra_plugins` namespace package at start-up (also for `--help`): the modules
here import neither optuna nor torch at module level.
"""
