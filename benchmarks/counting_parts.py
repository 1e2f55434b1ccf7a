"""What the architecture counters share: the tensors autograd saves, autocast's dtypes on the meta
device, the layers a LoRA wraps and the units FSDP makes.

`count_parameters.py` (SD1.5, SDXL, SD3) and `count_transformer_family.py` (the transformer
families) count with these, so neither imports the other's parts.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from studio.train.memory.sharding import unit_sizes


def lora_targets(model: nn.Module, targets: tuple[str, ...]) -> dict[str, Any]:
    """The Linear layers a LoRA wraps, grouped by (in, out) so any rank's size follows."""
    shapes: dict[tuple[int, int], int] = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and any(name == t or name.endswith("." + t) for t in targets):
            key = (module.in_features, module.out_features)
            shapes[key] = shapes.get(key, 0) + 1
    rows = [{"in": i, "out": o, "count": n} for (i, o), n in sorted(shapes.items())]
    return {
        "modules": list(targets),
        "layers": sum(r["count"] for r in rows),
        "in_plus_out": sum((r["in"] + r["out"]) * r["count"] for r in rows),
        "shapes": rows,
    }


def fsdp_units(model: nn.Module, units: tuple[str, ...]) -> dict[str, int]:
    """How launch.strategy = "fsdp" groups the model: unit count, the largest unit and the root's parameters."""
    sizes = unit_sizes(model, units)
    return {"units": sizes["units"], "largest_unit_params": sizes["largest_unit_params"],
            "root_params": sizes["root_params"]}


class SavedBytes:
    """Counts the distinct tensors autograd keeps for backward (parameters excluded)."""

    def __init__(self, params: set[int]) -> None:
        self.params = params
        self.seen: dict[int, torch.Tensor] = {}

    def _root(self, t: torch.Tensor) -> torch.Tensor:
        while t._base is not None:
            t = t._base
        return t

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        root = self._root(t)
        if id(root) not in self.params and not isinstance(root, nn.Parameter):
            self.seen[id(root)] = root
        return t

    @property
    def total(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.seen.values())


@contextmanager
def counting(counter: SavedBytes) -> Iterator[None]:
    with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
        yield


class MixedPrecision:
    """Autocast's dtype flow on meta tensors (autocast itself ignores them).

    Matmuls and convolutions compute in fp16 from fp32 or fp16 inputs; group and
    layer norms compute in fp32 and return fp32, so the tensors saved around them
    are as wide as on a GPU under `torch.autocast`.
    """

    def __init__(self) -> None:
        import torch.nn.functional as F

        self.F = F
        self.saved = {n: getattr(F, n) for n in ("linear", "conv2d", "group_norm", "layer_norm")}

    def __enter__(self) -> None:
        F, orig, half = self.F, self.saved, torch.float16

        def cast(t: Any, dtype: torch.dtype) -> Any:
            return t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t

        def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
            return orig["linear"](cast(x, half), cast(w, half), cast(b, half))  # type: ignore[no-any-return]

        def conv2d(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, *a: Any) -> torch.Tensor:
            return orig["conv2d"](cast(x, half), cast(w, half), cast(b, half), *a)  # type: ignore[no-any-return]

        def group_norm(x: torch.Tensor, groups: int, w: Any = None, b: Any = None, eps: float = 1e-5) -> torch.Tensor:
            f32 = torch.float32
            return orig["group_norm"](cast(x, f32), groups, cast(w, f32), cast(b, f32), eps)  # type: ignore[no-any-return]

        def layer_norm(x: torch.Tensor, shape: Any, w: Any = None, b: Any = None, eps: float = 1e-5) -> torch.Tensor:
            f32 = torch.float32
            return orig["layer_norm"](cast(x, f32), shape, cast(w, f32), cast(b, f32), eps)  # type: ignore[no-any-return]

        F.linear, F.conv2d, F.group_norm, F.layer_norm = linear, conv2d, group_norm, layer_norm  # type: ignore[assignment]

    def __exit__(self, *exc: object) -> None:
        for name, fn in self.saved.items():
            setattr(self.F, name, fn)


# Precision modes: fp32 (no mixed precision, as on a CPU), fp16 (half weights, no autocast),
# mixed (fp32 or fp16 weights under fp16/bf16 autocast, the usual GPU setting).
PRECISIONS = ("fp32", "mixed", "fp16")
