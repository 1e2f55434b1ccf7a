"""Peak live memory of a computation on the meta device (no weights, no memory used).

`LiveBytes` follows every tensor storage created while it is active, as the
caching allocator's `memory_allocated` would: a storage counts from the op that
creates it until the last tensor, view or autograd saved-tensor that holds it
is gone. Parameters and tensors made before it started are not counted. The
peak is what `torch.cuda.max_memory_allocated()` would add over the weights
for the same ops on a GPU (the caching allocator's rounding and fragmentation
come on top; see docs/benchmarks.md).

Used by `count_parameters.py` for the transient peaks the estimator needs:
the VAE encoder at the training size (latents not cached), the VAE decoder at
the sample size (sample images during training) and the text encoders.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class _Packed:
    """What autograd keeps for a saved tensor while the hooks are on; freed with the graph node."""

    __slots__ = ("__weakref__", "tensor")

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor


class LiveBytes(TorchDispatchMode):
    """Counts the bytes of live storages created by ops; `peak` is the largest sum seen."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: dict[int, int] = {}
        self.holders: dict[int, int] = {}
        self.now = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        self.holders[key] -= 1
        if self.holders[key] == 0:
            self.now -= self.sizes.pop(key)
            del self.holders[key]

    def _hold(self, key: int, owner: object) -> None:
        self.holders[key] += 1
        weakref.finalize(owner, self._release, key)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage()._cdata for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key = storage._cdata
            if key in inputs and key not in self.sizes:
                continue  # a view of a parameter or of an input made before counting started
            if key not in self.sizes:
                self.sizes[key] = storage.nbytes()
                self.holders[key] = 0
                self.now += storage.nbytes()
                self.peak = max(self.peak, self.now)
            self._hold(key, t)
        return out

    def pack(self, t: torch.Tensor) -> _Packed:
        packed = _Packed(t)
        key = t.untyped_storage()._cdata
        if key in self.sizes:
            self._hold(key, packed)
        return packed

    @staticmethod
    def unpack(packed: _Packed) -> torch.Tensor:
        return packed.tensor


@contextmanager
def live_bytes() -> Iterator[LiveBytes]:
    """Track live storages (and what autograd saves) inside the block."""
    mode = LiveBytes()
    with torch.autograd.graph.saved_tensors_hooks(mode.pack, mode.unpack), mode:
        yield mode


def peak_bytes(fn: Callable[[], Any]) -> int:
    """Peak live bytes while `fn()` runs, its result dropped at the end."""
    with live_bytes() as mode:
        result = fn()
        del result
    return mode.peak


class FlashLikeAttention(torch.autograd.Function):
    """SDPA on meta tensors as a flash / memory-efficient kernel runs it: no score matrix.

    Forward keeps q, k, v, the output and the fp32 log-sum-exp; backward makes dq, dk, dv.
    """

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = q.new_empty((*q.shape[:-1], v.shape[-1]))
        lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v, _, _ = ctx.saved_tensors
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def flash_like(*args: Any, **kwargs: Any) -> torch.Tensor:
    """SDPA's signature, positional or by keyword (diffusers' attention dispatch passes query=, key=, value=)."""
    q, k, v = (list(args[:3]) + [kwargs.get(name) for name in ("query", "key", "value")][len(args[:3]):])[:3]
    return FlashLikeAttention.apply(q, k, v)  # type: ignore[no-any-return]


@contextmanager
def flash_attention() -> Iterator[None]:
    """Route F.scaled_dot_product_attention through `flash_like` inside the block."""
    original = torch.nn.functional.scaled_dot_product_attention
    torch.nn.functional.scaled_dot_product_attention = flash_like  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original
