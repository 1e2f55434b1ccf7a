"""training.compile: torch.compile of the denoiser, by repeated block (regional) or whole, or whole and
replayed as CUDA graphs.

Regional compilation compiles the code of one transformer block and reuses it for
every block of the same shapes, so the first step costs seconds to a minute, not the
many minutes a whole UNet takes. Shapes are static (dynamic=False): each image size
(bucket) compiles the blocks once more, and the first step of a new size is reported
as a `compiling` phase. Compiled kernels are kept in the studio's cache folder, so
the next run of the same shapes loads them instead of compiling again. Samples run
the same modules eagerly: their shapes (guidance doubles the batch) would compile
again for a handful of images.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from studio.core.families import family as declared_family
from studio.core.user_dirs import cache_dir
from studio.train.errors import TrainError

CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"
# torch.compile's backend: inductor (the default) builds kernels; STUDIO_COMPILE_BACKEND=aot_eager traces
# and splits the graphs the same way but runs them with torch's own kernels, which tells a problem of the
# kernel compiler from one of the graphs (and is how the suite checks most compiled set-ups quickly).
BACKEND_ENV = "STUDIO_COMPILE_BACKEND"
BACKENDS = ("inductor", "aot_eager", "eager")
# Compiled variants kept per block: image sizes x block shapes (SDXL has three widths); past the
# limit torch runs the block eagerly, so the limit is generous.
RECOMPILE_LIMIT = 64


def compile_cache_dir() -> Path:
    """Where compiled kernels are kept between runs: the studio's cache folder."""
    return cache_dir() / "torch-compile"


def use_compile_cache() -> Path:
    """Point torch's compile cache (inductor's, Triton's under it) at the studio's cache folder,
    unless the person chose one with TORCHINDUCTOR_CACHE_DIR.

    Importing diffusers already sets that variable to torch's default (a folder in /tmp that does
    not outlive a reboot), so that value counts as nobody's choice.
    """
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    chosen = os.environ.get(CACHE_ENV)
    if chosen and os.path.abspath(chosen) != os.path.abspath(default_cache_dir()):
        return Path(chosen)
    folder = compile_cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[CACHE_ENV] = str(folder)
    return folder


@dataclass
class CompiledDenoiser:
    """What was compiled, and the image sizes compiled for so far."""

    mode: str
    what: str  # e.g. "24 JointTransformerBlock blocks"
    seen: set[Any] = field(default_factory=set)

    def is_new_shape(self, key: Any) -> bool:
        """True the first time a step brings images of this size (the blocks compile for it)."""
        if key in self.seen:
            return False
        self.seen.add(key)
        return True


def compile_backend() -> str:
    """The backend STUDIO_COMPILE_BACKEND names (inductor when unset); another value is refused with the choices."""
    chosen = os.environ.get(BACKEND_ENV, "").strip() or BACKENDS[0]
    if chosen not in BACKENDS:
        raise TrainError("config", f"{BACKEND_ENV}={chosen!r} is not a compile backend the studio uses",
                         f"set it to one of {', '.join(BACKENDS)}, or unset it")
    return chosen


def block_classes(denoiser: torch.nn.Module, declared: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The denoiser's repeated blocks: those its diffusers class names, else the family's declaration's."""
    named = getattr(denoiser, "_repeated_blocks", None)
    return tuple(named) if named else declared


def compile_denoiser(denoiser: torch.nn.Module, mode: str, family: str | None = None) -> CompiledDenoiser | None:
    """Compile `denoiser` in place as training.compile asks; None when it is "off".

    Call it after LoRA layers and gradient checkpointing are in place and before the
    module is wrapped for data parallelism: the compiled blocks are the very modules
    DDP and the optimizer see. The blocks are the ones the denoiser's class names, else the ones
    `family`'s declaration names (`FamilySpec.repeated_blocks`).
    """
    if mode == "off":
        return None
    import torch._dynamo

    backend = compile_backend()
    use_compile_cache()
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, RECOMPILE_LIMIT)
    name = type(denoiser).__name__
    if mode == "full":
        denoiser.compile(dynamic=False, backend=backend)
        return CompiledDenoiser(mode, f"the whole {name}")
    if mode == "graphs":
        # One CUDA graph per image size (CUDA graph trees; static shapes): a step's thousands of kernel
        # launches become one replay, so a small batch no longer waits on the CPU. On the CPU it compiles
        # as "full" does (torch skips the graphs there).
        denoiser.compile(dynamic=False, mode="reduce-overhead")
        return CompiledDenoiser(mode, f"the whole {name}, replayed as CUDA graphs")
    classes = block_classes(denoiser, declared_family(family).repeated_blocks if family else ())
    blocks = [m for m in denoiser.modules() if type(m).__name__ in classes]
    if not blocks:
        raise TrainError("config", f"training.compile = \"blocks\": the {name} has no repeated blocks the studio "
                         "knows how to compile", "set training.compile = \"full\" or \"off\"")
    if getattr(denoiser, "_repeated_blocks", None) and hasattr(denoiser, "compile_repeated_blocks"):
        denoiser.compile_repeated_blocks(dynamic=False, backend=backend)  # type: ignore[operator]
    else:
        for block in blocks:
            block.compile(dynamic=False, backend=backend)
    return CompiledDenoiser(mode, f"{len(blocks)} {' / '.join(classes)} blocks")


def begin_step(compiled: CompiledDenoiser | None) -> None:
    """A new training step begins: the CUDA graphs may reuse the memory of the last step's outputs."""
    if compiled is not None and compiled.mode == "graphs":
        torch.compiler.cudagraph_mark_step_begin()


def keeps_grads(compiled: CompiledDenoiser | None, accumulation: int) -> bool:
    """Whether the step keeps its gradients in buffers of their own, zeroed between steps (CUDA graphs with
    gradient accumulation).

    A backward replayed as a CUDA graph writes its gradients into the graphs' own memory, and the first
    micro-batch's would become the parameters' .grad there. While that memory holds a live gradient, the
    next micro-batch cannot replay its image size's graphs: it records new ones after them, so a step of
    four micro-batches records four forward and four backward graphs, and every new order of image sizes
    in a step records more (GPU memory and a long unreported step each time). With buffers of their own,
    each backward adds into them and its output is free again: every micro-batch replays its size's graph.
    """
    return compiled is not None and compiled.mode == "graphs" and accumulation > 1


def give_grads(params: list[torch.nn.Parameter]) -> None:
    """Zeroed gradient buffers for the parameters that have none yet (see keeps_grads)."""
    for param in params:
        if param.grad is None:
            param.grad = torch.zeros_like(param)


@contextlib.contextmanager
def eager(compiled: CompiledDenoiser | None) -> Iterator[None]:
    """Run compiled modules eagerly inside (samples: other shapes, a few images)."""
    if compiled is None:
        yield
        return
    with torch.compiler.set_stance("force_eager"):
        yield


def shutdown_compile_workers(compiled: CompiledDenoiser | None) -> None:
    """End the compiler's worker processes (they would outlive a run that ends with os._exit)."""
    if compiled is None:
        return
    from torch._inductor.async_compile import shutdown_compile_workers as shutdown

    shutdown()
