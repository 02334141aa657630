"""ONNX: export with a dynamic batch axis, check the file, and prove onnxruntime computes what PyTorch computes.

Why the parity check is part of exporting: an exporter that mistranslates one op still writes a valid file, so the
file is only trusted after onnxruntime matched PyTorch on the whole test split (max |Δlogits| and argmax agreement,
printed and enforced by the export job's `parity.atol` and `parity.min_agreement`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.export import Dim

from litforge.core.contracts import ComparesOutputs, ExampleInput
from litforge.core.errors import ConfigError
from litforge.deploy.net import batched
from litforge.tasks.task import compare_by_argmax

if TYPE_CHECKING:
    from torch import Tensor, nn

Compare = Callable[["Tensor", "Tensor"], dict[str, float]]  # a task's compare_outputs(reference, exported)

MAX_EMBEDDED_BYTES = 1 << 30  # protobuf's limit is 2 GiB; beyond 1 GiB keep weights in model.onnx.data


def export_onnx(
    net: nn.Module,
    example: Tensor | Sequence[ExampleInput],
    path: Path,
    opset: int | None = None,
    names: tuple[str, str] = ("images", "logits"),
) -> Path:
    """Dynamo export of `net` on one example batch (input `names[0]`, a dynamic batch axis) or on declared inputs
    (litforge.ExampleInput: names, dtypes, dynamic axes; axes of one name share one size); output `names[1]`.
    Weights embedded unless they exceed ~1 GiB (then `model.onnx` + `model.onnx.data`, which must stay together)."""
    inputs = [ExampleInput(names[0], example, {0: "batch"})] if isinstance(example, torch.Tensor) else list(example)
    dims = {axis: Dim(axis) for i in inputs for axis in i.dynamic_axes.values()}
    for name in ("onnxscript", "onnx_ir"):  # the exporter's optimiser narrates every pass at INFO
        logging.getLogger(name).setLevel(logging.WARNING)
    path.parent.mkdir(parents=True, exist_ok=True)
    weight_bytes = sum(t.numel() * t.element_size() for t in net.state_dict().values())
    embed = weight_bytes < MAX_EMBEDDED_BYTES
    try:
        torch.onnx.export(
            net,
            tuple(i.example for i in inputs),
            str(path),
            dynamo=True,
            input_names=[i.name for i in inputs],
            output_names=[names[1]],
            dynamic_shapes=tuple({axis: dims[name] for axis, name in i.dynamic_axes.items()} for i in inputs),
            external_data=not embed,
            opset_version=opset,
            verbose=False,
        )
    except Exception as exc:  # an op the exporter cannot translate: name the net and the op
        raise ConfigError(f"torch.onnx.export failed for {type(net).__name__}: {str(exc).splitlines()[0]}") from exc
    import onnx  # extra [deploy]

    onnx.checker.check_model(str(path))  # by path: also validates an external model.onnx.data
    return path


def comparison(task: object) -> Compare:
    """How export judges parity for `task`: its own `compare_outputs` (litforge.ComparesOutputs), else argmax."""
    return task.compare_outputs if isinstance(task, ComparesOutputs) else compare_by_argmax


def ort_session(path: Path | str) -> Any:
    """An onnxruntime session on the CPU provider (the one the parity and the report measure), default threads."""
    import onnxruntime as ort  # extra [deploy]

    return ort.InferenceSession(str(path), ort.SessionOptions(), providers=["CPUExecutionProvider"])


def check_parity(
    onnx_path: Path,
    x: Tensor,
    ref: Tensor,
    atol: float,
    min_agreement: float,
    input_name: str = "images",
    what: str = "images",
    compare: Compare = compare_by_argmax,
) -> dict[str, float]:
    """onnxruntime vs PyTorch on the whole test split, judged by `compare` (the task's `compare_outputs`)."""
    session = ort_session(onnx_path)
    out = batched(lambda b: session.run(None, {input_name: b.numpy()})[0], x)
    return judge_parity(compare(ref, out), out, atol, min_agreement, f"{len(x)} test {what}")


def judge_parity(
    figures: dict[str, float], out: Tensor, atol: float, min_agreement: float, on: str
) -> dict[str, float]:
    """Print the parity line; a mismatch beyond the tolerances (or a non-finite output) stops the export."""
    diff, agreement = figures["max_abs_diff"], figures["agreement"]
    print(
        f"ONNX parity on {on}: max |output diff| = {diff:.2e} (limit {atol:g}), "
        f"agreement = {agreement:.2%} (limit {min_agreement:.1%})"
    )
    if not (diff <= atol and agreement >= min_agreement) or not torch.isfinite(out).all():
        raise ConfigError(
            f"ONNX parity failed on {on}: max |diff| {diff:.3g} (limit {atol:g}), agreement {agreement:.4f} "
            f"(limit {min_agreement}); the exported model is not trustworthy: try another opset= "
            "or report the net"
        )
    return figures
