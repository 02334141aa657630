"""The figures the suite pins, in one place: tests/test_speed.py asserts against them and tests/test_docs.py checks
that docs/performance.md and benchmarks/README.md state them as they are here.

Python calls per optimizer step are counted with `sys.setprofile` (tests/test_speed.py's CountCalls): unlike wall
time the count does not move with machine load, so a regression (one more `self.log` per step, a callback doing work
every batch) fails on any machine.

Measured (digits MLP, torch 2.14.1, Lightning 2.6.6): plain PyTorch loop ≈ 200 calls/step, Lightning barebones
≈ 1,180, litforge's default run (logger, progress bar, checkpointing, early stopping, LR monitor, the NaN-loss check,
the SIGTERM checkpoint, throughput, 11 callbacks with the counter and the provenance recorder) `MEASURED_CALLS_PER_STEP`
in the test's window (benchmarks/step_overhead.py: 2,166); Lightning's "usual defaults" ≈ 5,300. Lightning calls all
six per-step hooks on every callback, ~60 calls per callback per step (no process-wide patch of its dispatch).
"""

from __future__ import annotations

# the default run, per optimizer step: room for library patch releases, not for one more `self.log` per step (~+600)
CALLS_PER_STEP_BUDGET = 2_350
MEASURED_CALLS_PER_STEP = 2_158
USUAL_DEFAULTS = 5_300  # Lightning with its usual defaults (the budget must stay well under it)

# steps_per_call=8 (8 optimizer steps per Lightning step), per optimizer step
STEPS_PER_CALL_BUDGET = 400
MEASURED_STEPS_PER_CALL_8 = 351

# the epoch boundary (validation, the best-checkpoint choice, last.ckpt, epoch-end logging) on an improving epoch:
# Lightning's documented pair (a monitored ModelCheckpoint for the best, an unmonitored one for last.ckpt) serialises
# last.ckpt a second time (≈ 5,500 calls; its fsync in the background) and every epoch-end hook reaches every callback
CALLS_PER_EPOCH_BOUNDARY_BUDGET = 24_000
MEASURED_CALLS_PER_EPOCH_BOUNDARY = 22_312
