"""ONNX: export with a dynamic batch axis, check the file, and prove onnxruntime computes what PyTorch computes.

Why the parity check is part of exporting: an exporter that mistranslates one op still writes a valid file, so the
file is only trusted after onnxruntime matched PyTorch on the whole test split (max |Δlogits| and argmax agreement,
printed and enforced by the export job's `parity.atol` and `parity.min_agreement`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.export import Dim

from litforge.core.errors import ConfigError
from litforge.deploy.net import batched

if TYPE_CHECKING:
    from torch import Tensor, nn

MAX_EMBEDDED_BYTES = 1 << 30  # protobuf's limit is 2 GiB; beyond 1 GiB keep weights in model.onnx.data


def export_onnx(
    net: nn.Module, example: Tensor, path: Path, opset: int | None = None, names: tuple[str, str] = ("images", "logits")
) -> Path:
    """Dynamo export with a dynamic batch axis; weights embedded unless they exceed ~1 GiB (then `model.onnx` +
    `model.onnx.data`, which must stay together)."""
    for name in ("onnxscript", "onnx_ir"):  # the exporter's optimiser narrates every pass at INFO
        logging.getLogger(name).setLevel(logging.WARNING)
    path.parent.mkdir(parents=True, exist_ok=True)
    weight_bytes = sum(t.numel() * t.element_size() for t in net.state_dict().values())
    embed = weight_bytes < MAX_EMBEDDED_BYTES
    try:
        torch.onnx.export(
            net,
            (example,),
            str(path),
            dynamo=True,
            input_names=[names[0]],
            output_names=[names[1]],
            dynamic_shapes=({0: Dim("batch")},),
            external_data=not embed,
            opset_version=opset,
            verbose=False,
        )
    except Exception as exc:  # an op the exporter cannot translate: name the net and the op
        raise ConfigError(f"torch.onnx.export failed for {type(net).__name__}: {str(exc).splitlines()[0]}") from exc
    import onnx  # extra [deploy]

    onnx.checker.check_model(str(path))  # by path: also validates an external model.onnx.data
    return path


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
) -> dict[str, float]:
    """onnxruntime vs PyTorch on the whole test split; a mismatch beyond the tolerances stops the export."""
    session = ort_session(onnx_path)
    out = batched(lambda b: session.run(None, {input_name: b.numpy()})[0], x)
    diff = float((out - ref).abs().max())
    agreement = float((out.argmax(1) == ref.argmax(1)).float().mean())
    print(
        f"ONNX parity on {len(x)} test {what}: max |output diff| = {diff:.2e} (limit {atol:g}), "
        f"argmax agreement = {agreement:.2%} (limit {min_agreement:.1%})"
    )
    if not (diff <= atol and agreement >= min_agreement) or not torch.isfinite(out).all():
        raise ConfigError(
            f"ONNX parity failed: max |diff| {diff:.3g} (limit {atol:g}), agreement {agreement:.4f} "
            f"(limit {min_agreement}); the exported model is not trustworthy: try another opset= "
            "or report the net"
        )
    return {"max_abs_diff": diff, "agreement": agreement}
