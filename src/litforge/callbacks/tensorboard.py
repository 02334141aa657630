"""TensorBoard extras: the HParams tab with final metrics, and the model graph.

Both write only through a logger that has TensorBoard's `SummaryWriter` as its experiment, so they are no-ops with
`logger=csv` or `logger=null`. The default run holds them in litforge.callbacks.tensorboard_extras.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterator
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.loggers import TensorBoardLogger
from pytorch_lightning.utilities import rank_zero_only

from litforge.core.contracts import ImageInputs, net_of
from litforge.records.metrics import scalar_metrics
from litforge.tasks.task import LitforgeTask

log = logging.getLogger(__name__)


def tensorboard_loggers(trainer: pl.Trainer) -> Iterator[TensorBoardLogger]:
    yield from (lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger))


class HParamsSummary(pl.Callback):
    """One HParams entry per run: the hyperparameters with the final metrics, so a sweep compares in one table.

    TensorBoard keeps the first hparams record of a run, so it is written once, when the last metrics exist: after
    the test when the job tests (`after_test`, tied to `test_after_training`), else after fit. Metrics appear as
    `hp/<name>`: `val/*` at the end of training, `test/*` of the tested (best) checkpoint.
    """

    def __init__(self, after_test: bool = True) -> None:
        self.after_test = after_test
        self._fit_metrics: dict[str, float] = {}

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fit_metrics = scalar_metrics(trainer.callback_metrics)
        if not self.after_test or trainer.interrupted:
            self._write(trainer, pl_module, self._fit_metrics)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.after_test:
            self._write(trainer, pl_module, {**self._fit_metrics, **scalar_metrics(trainer.callback_metrics)})

    @rank_zero_only
    def _write(self, trainer: pl.Trainer, pl_module: pl.LightningModule, metrics: dict[str, float]) -> None:
        if not metrics:
            return
        params = run_hparams(pl_module)
        for logger in tensorboard_loggers(trainer):
            logger.log_hyperparams(params, metrics={f"hp/{k}": v for k, v in metrics.items()}, step=trainer.global_step)
            logger.experiment.flush()


def run_hparams(pl_module: pl.LightningModule) -> dict[str, Any]:
    """What defines the run: the task's hyperparameters plus the seed and the data settings (batch size, ...)."""
    params: dict[str, Any] = dict(pl_module.hparams)
    run_config = (pl_module.run_config if isinstance(pl_module, LitforgeTask) else None) or {}
    params["seed"] = run_config.get("seed")
    params["data"] = {k: v for k, v in (run_config.get("data") or {}).items() if not str(k).startswith("_")}
    params.pop("class_names", None)  # long and the same for every run of a dataset
    return params


class ModelGraph(pl.Callback):
    """The model graph (TensorBoard's Graphs tab), traced once when training ends, with a zero batch of the data's
    shape. At the end, not at fit start: the trace (torch.jit, which runs the net twice to check itself) was the
    largest fixed cost between launch and the first optimizer step after the imports (benchmarks/README.md); the
    graph is the same at either end, only a run that crashes before its end has none.

    Skipped with a warning where tracing fails (data-dependent control flow) and on more than one process (a
    sharded module cannot run a forward pass on one rank alone). The module is traced in eval mode so BatchNorm
    statistics and RNG streams are the same as in a run without this callback.
    """

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loggers = list(tensorboard_loggers(trainer))
        if not loggers or trainer.world_size > 1 or not trainer.is_global_zero or trainer.sanity_checking:
            return
        net = net_of(pl_module)
        if not isinstance(net, torch.nn.Module):
            log.warning("Model graph not logged to TensorBoard: the task has no plain `net` module to trace")
            return
        example = example_input(trainer, pl_module)
        if example is None:
            return
        was_training = pl_module.training
        pl_module.eval()
        try:
            with torch.no_grad(), warnings.catch_warnings():
                # TensorBoard's add_graph still traces with torch.jit, which torch now flags as deprecated
                warnings.filterwarnings("ignore", message=r".*torch\.jit\.trace", category=FutureWarning)
                # shape checks in a net's forward (the GPT's block_size) are constants in a traced graph, as wanted
                warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
                for logger in loggers:
                    # the task's plain net: no LightningModule attribute (trainer, metrics) is read by the tracer
                    logger.experiment.add_graph(net, example.to(pl_module.device))
        except Exception as exc:  # tracing is best effort: the run must not fail for a picture
            log.warning("Model graph not logged to TensorBoard (tracing failed: %s)", str(exc).splitlines()[0])
        finally:
            pl_module.train(was_training)


def example_input(trainer: pl.Trainer, pl_module: pl.LightningModule) -> torch.Tensor | None:
    example = pl_module.example_input_array
    if isinstance(example, torch.Tensor):
        return example
    datamodule = trainer.datamodule  # type: ignore[attr-defined]  # Lightning's connectors set it; Trainer does not declare it
    shape = (datamodule.input_shape if isinstance(datamodule, ImageInputs) else None) or pl_module.hparams.get(
        "input_shape"
    )
    return torch.zeros(1, *shape) if shape else None
