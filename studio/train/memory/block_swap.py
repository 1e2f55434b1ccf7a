"""model.blocks_to_swap: the frozen weights of the denoiser's last blocks wait in system memory and come to
the GPU one block ahead of use.

A LoRA run reads its frozen base weights but never changes them, so a swapped block's weights need no copy
back: the host copy (pinned, so the copy is queued like a kernel) is the only one kept, and a block's GPU copy
is dropped as soon as the block is done. Before a block runs forward its weights are already on their way:
each block, as it starts, sends for the next swapped one on a side CUDA stream, and the compute stream waits
on that copy's event only when the block is about to use it. The backward pass needs the same weights again
(a frozen layer's gradient with respect to its input is computed with its weight), so each swapped block's
output passes through a marker whose backward brings the block back (and sends for the one before it), and
its input through one whose backward drops it again: in reverse order, at most two swapped blocks on the GPU
at once. That bound holds for the memory too: the host queues a step's blocks far ahead of the GPU, so the
side stream first waits for the work the compute stream was given, and each copy takes the memory of a block
dropped before it. Gradient checkpointing's recomputation runs the block's forward inside the backward pass;
it finds the block already there and leaves it there.

The LoRA (or LyCORIS) weights are trainable parameters of the same blocks and are never moved: they, their
gradients and their optimizer state stay on the GPU. A swapped-out weight holds an empty tensor, so a block
that ran without its weights would fail at once instead of computing with stale numbers; on the CPU the
"device" copy is a real copy of the host one, so the schedule is exercised (and tested) there too.

musubi-tuner's ModelOffloader swaps whole blocks' weights in place both ways (it trains full models too) and
brings blocks back from backward hooks; OneTrainer's LayerOffloadConductor keeps a fixed window of layers on
the GPU. This one copies one way only, since every swapped weight is frozen.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

# The attribute of a denoiser that holds its BlockSwap, for code that reads its frozen weights (`weights_on_host`).
SWAP_ATTRIBUTE = "_studio_block_swap"


class _Marker(torch.autograd.Function):
    """Passes tensors through unchanged; its backward calls `callback` before the gradients flow on."""

    @staticmethod
    def forward(ctx: Any, callback: Callable[[], None], *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.callback = callback
        return tuple(t.view_as(t) for t in tensors)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[Any, ...]:
        ctx.callback()
        return (None, *grads)


def _marked(values: Sequence[Any], callback: Callable[[], None]) -> list[Any] | None:
    """`values` with the tensors that carry gradients passed through one marker; None when none do."""
    where = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor) and v.requires_grad]
    if not where:
        return None
    passed = _Marker.apply(callback, *(values[i] for i in where))
    out = list(values)
    for i, tensor in zip(where, passed, strict=True):
        out[i] = tensor
    return out


class _WeightView:
    """What autograd keeps of a swapped weight it saved for the backward pass: the weight, and how the saved
    tensor (the weight itself, or its transpose) looks at it, so the backward reads the copy brought back."""

    def __init__(self, parameter: torch.nn.Parameter, tensor: torch.Tensor) -> None:
        self.parameter = parameter
        # Where the saved tensor starts, from where the weight does (the copy brought back has its own storage).
        self.layout = (tensor.size(), tensor.stride(), tensor.storage_offset() - parameter.data.storage_offset())

    def tensor(self) -> torch.Tensor:
        size, stride, offset = self.layout
        weight = self.parameter.data
        return weight.as_strided(size, stride, weight.storage_offset() + offset)


def _views(tensor: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `tensor` (of the same storage) looks at `weight`: its dtype, starting inside it."""
    start = weight.storage_offset()
    return tensor.dtype == weight.dtype and start <= tensor.storage_offset() < start + weight.numel()


def _unpack(saved: Any) -> Any:
    return saved.tensor() if isinstance(saved, _WeightView) else saved


def _same_device(tensor_device: torch.device, device: torch.device) -> bool:
    """Whether a tensor is on `device`: on one GPU the run's device is plain "cuda" (the current GPU) while its
    tensors say "cuda:0", which `==` tells apart."""
    if tensor_device.type != device.type:
        return False
    return tensor_device.index is None or device.index is None or tensor_device.index == device.index


def _others_hooks_active() -> bool:
    """Whether saved-tensor hooks are in force already (gradient checkpointing keeps nothing saved itself)."""
    return torch._C._autograd._top_saved_tensors_default_hooks(False) is not None


def _in_backward() -> bool:
    """Whether autograd's engine is running (a checkpointed block recomputing its forward)."""
    return bool(torch._C._current_graph_task_id() != -1)


PINNED_CHUNK_BYTES = 256 * 2**20  # a power of two, which torch's pinned-memory allocator does not round up
_ALIGN = 512  # bytes between one weight's start and the next one's (any dtype's alignment)


@dataclass
class HostCopies:
    """Host copies of weights, and the buffers they are packed into."""

    tensors: list[torch.Tensor]  # one per weight, in the order given
    buffers: list[torch.Tensor]  # the shared buffers (a weight larger than one, or a subclass's, has its own)
    reserved: int  # bytes of system memory they take in all


def host_copies(tensors: Sequence[torch.Tensor], pinned: bool) -> HostCopies:
    """The swapped weights' host copies, packed into a few buffers of a power-of-two size each.

    torch's pinned-memory allocator rounds every allocation up to the next power of two, so one pinned tensor per
    weight took 44-58% more system memory than the weights (FLUX.2 [klein] 9B with 30 blocks swapped: 10.5 GiB
    pinned for 7.3 GiB of weights). Buffers of a power-of-two size are not rounded; the weights are placed largest
    first, each in the first buffer with room, and each buffer is cut to the power of two its weights need. A
    weight larger than a buffer gets one of its own; a weight of a tensor subclass (a quantized layer's) is copied
    as it is. Pinned on a GPU; on the CPU the same packing in ordinary memory, so the tests exercise it.

    Given parameters, each one's weight becomes its copy as soon as the copy is made, and the buffers are made
    one at a time: the weights waiting in system memory go as their copies come, so the machine never holds
    the swapped weights twice (Qwen-Image with 45 blocks swapped: 14 GiB more, past the RAM estimate's peak)."""
    where, used = _packing(tensors)  # each weight is read from its parameter when copied, which then lets it go
    buffers: list[torch.Tensor] = []
    copies: list[torch.Tensor | None] = [None] * len(tensors)
    reserved = 0
    for i in sorted(where, key=lambda i: where[i]):  # buffer by buffer
        at, offset = where[i]
        if at == len(buffers):
            buffers.append(_buffer(_power_of_two(used[at]), pinned))
            reserved += buffers[-1].numel()
        copies[i] = _copied(tensors[i], _placed(buffers[at], offset, _weight(tensors[i])))
    for i, tensor in enumerate(tensors):
        if i not in where:
            host = _weight(tensor).to("cpu")
            host = host.pin_memory() if pinned else host
            reserved += host.numel() * host.element_size()
            copies[i] = _copied(tensor, host)
    return HostCopies([c for c in copies if c is not None], buffers, reserved)


def _packing(tensors: Sequence[torch.Tensor]) -> tuple[dict[int, tuple[int, int]], list[int]]:
    """Where each plain weight goes, largest first: {weight: (buffer, offset)}, and the bytes of each buffer."""
    sizes = {i: _aligned(_weight(t)) for i, t in enumerate(tensors) if type(_weight(t)) is torch.Tensor}
    used: list[int] = []
    where: dict[int, tuple[int, int]] = {}
    for i in sorted((i for i, size in sizes.items() if size <= PINNED_CHUNK_BYTES), key=lambda i: -sizes[i]):
        at = next((b for b, taken in enumerate(used) if taken + sizes[i] <= PINNED_CHUNK_BYTES), len(used))
        if at == len(used):
            used.append(0)
        where[i], used[at] = (at, used[at]), used[at] + sizes[i]
    return where, used


def _placed(buffer: torch.Tensor, offset: int, like: torch.Tensor) -> torch.Tensor:
    """The part of `buffer` from `offset` shaped as `like` (whose values it does not take)."""
    return buffer[offset:offset + like.numel() * like.element_size()].view(like.dtype).view(like.shape)


def _buffer(size: int, pinned: bool) -> torch.Tensor:
    return torch.empty(size, dtype=torch.uint8, pin_memory=pinned)


def _weight(tensor: torch.Tensor) -> torch.Tensor:
    return (tensor.data if isinstance(tensor, torch.nn.Parameter) else tensor).detach()


def _copied(tensor: torch.Tensor, host: torch.Tensor) -> torch.Tensor:
    """`host` holding `tensor`'s values; a parameter's weight is the copy from now on (its own memory goes)."""
    if host.data_ptr() != tensor.data_ptr():
        host.copy_(_weight(tensor))
    if isinstance(tensor, torch.nn.Parameter):
        tensor.data = host
    return host


def _aligned(tensor: torch.Tensor) -> int:
    return -(-tensor.numel() * tensor.element_size() // _ALIGN) * _ALIGN


def _power_of_two(size: int) -> int:
    return 1 << max(0, size - 1).bit_length()


class BlockSwap:
    """The last `count` of `blocks` (in forward order) with their frozen weights kept off `device`."""

    def __init__(self, blocks: Sequence[torch.nn.Module], count: int, device: torch.device) -> None:
        self.blocks = list(blocks)
        self.device = device
        self.first = len(self.blocks) - count
        cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device) if cuda else None
        # Per swapped block: each frozen parameter with its host copy.
        self.host: dict[int, list[tuple[torch.nn.Parameter, torch.Tensor]]] = {}
        # Swapped blocks whose copy has been sent for: the device tensors and the copy's event.
        self.incoming: dict[int, tuple[list[torch.Tensor], Any]] = {}
        self.resident: set[int] = set()
        self.most_resident = 0  # the most swapped blocks on the device at once (what the tests read)
        self.copies = 0  # block copies made from the host
        self.hooks: list[Any] = []
        self.saving: dict[int, Any] = {}  # the saved-tensor hooks open while a swapped block runs forward
        swapped = {index: [p for p in self.blocks[index].parameters() if not p.requires_grad]
                   for index in range(self.first, len(self.blocks))}
        copies = iter(host_copies([p for frozen in swapped.values() for p in frozen], pinned=cuda).tensors)
        for index, frozen in swapped.items():
            self.host[index] = [(p, next(copies)) for p in frozen]
            self._drop(index)
        for index, block in enumerate(self.blocks):
            self.hooks.append(block.register_forward_pre_hook(partial(self._before, index), with_kwargs=True))
            if index in self.host:
                self.hooks.append(block.register_forward_hook(partial(self._after, index)))
        if cuda:
            torch.cuda.empty_cache()  # the swapped weights' GPU memory goes back to the driver

    @property
    def swapped(self) -> int:
        return len(self.host)

    def swapped_bytes(self) -> int:
        return sum(host.numel() * host.element_size() for pairs in self.host.values() for _, host in pairs)

    # ------------------------------------------------------------ moving one block

    def _send_for(self, index: int) -> None:
        """Start copying block `index`'s weights to the device (on the side stream on a GPU)."""
        if index not in self.host or index in self.resident or index in self.incoming:
            return
        pairs = self.host[index]
        self.copies += 1
        # Ordinary tensors even when a sample runs under inference mode: training uses them next.
        with torch.inference_mode(False):
            if self.stream is None:
                self.incoming[index] = (self._device_copy(pairs), None)
                return
            # The copy's memory may be a dropped block's, which the compute stream may still be reading: the host
            # queues blocks far ahead of the GPU. The side stream waits for what the compute stream was given so
            # far, so the caching allocator can hand that memory straight back to the next copy.
            self.stream.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(self.stream):
                moved = self._device_copy(pairs)
                event = torch.cuda.Event()
                event.record(self.stream)
        self.incoming[index] = (moved, event)

    def _device_copy(self, pairs: list[tuple[torch.nn.Parameter, torch.Tensor]]) -> list[torch.Tensor]:
        """A block's weights on the device, the plain ones as views of one allocation: the caching allocator then
        fits a block's copy into the memory of a block dropped before it whatever their layers' sizes (a copy per
        weight left FLUX.2 [klein]'s single-stream blocks unable to fit the holes of its double-stream ones: about
        190 MB more than two blocks for the 4B, 290 MB for the 9B). A quantized layer's weight (a tensor subclass,
        with its own state) moves as it is."""
        plain = [host for _, host in pairs if type(host) is torch.Tensor]
        flat = torch.empty(sum(_aligned(host) for host in plain), dtype=torch.uint8, device=self.device)
        moved, offset = [], 0
        for _, host in pairs:
            if type(host) is not torch.Tensor:
                moved.append(host.clone() if self.stream is None else host.to(self.device, non_blocking=True))
                continue
            view = flat[offset:offset + host.numel() * host.element_size()].view(host.dtype).view(host.shape)
            moved.append(view.copy_(host, non_blocking=True))
            offset += _aligned(host)
        return moved

    def _bring(self, index: int) -> None:
        """Block `index`'s weights in place on the device, once their copy has arrived."""
        if index not in self.host or index in self.resident:
            return
        self._send_for(index)
        moved, event = self.incoming.pop(index)
        if event is not None:
            # No record_stream: it would keep a dropped block's memory from the next copy until the GPU caught up
            # with the host, so every block queued ahead held its own (the next copy's wait makes reuse safe).
            torch.cuda.current_stream(self.device).wait_event(event)
        for (parameter, _), tensor in zip(self.host[index], moved, strict=True):
            parameter.data = tensor
        self.resident.add(index)
        self.most_resident = max(self.most_resident, len(self.resident))

    def _drop(self, index: int) -> None:
        """Block `index`'s device copy let go: an empty placeholder in each weight's place."""
        with torch.inference_mode(False):
            for parameter, host in self.host[index]:
                parameter.data = torch.empty(0, dtype=host.dtype, device=self.device)
        self.resident.discard(index)

    # ------------------------------------------------------------ the hooks

    def _before(self, index: int, module: torch.nn.Module, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        backward = _in_backward()
        if not backward:  # a new forward: what an earlier pass left behind is not needed
            for stale in [i for i in self.resident if i not in (index, index + 1)]:
                self._drop(stale)
            while self.saving:  # a forward that raised half-way left its hooks open
                self.saving.popitem()[1].__exit__(None, None, None)
        self._bring(index)
        self._send_for(index - 1 if backward else index + 1)
        if backward or index not in self.host or not torch.is_grad_enabled():
            return None
        if not _others_hooks_active():
            self._keep_weights_unsaved(index)
        # The gradient reaching this block's inputs means its backward is done: its weights may go.
        drop = partial(self._drop, index)
        names = list(kwargs)
        marked = _marked([*args, *(kwargs[n] for n in names)], drop)
        if marked is None:
            return None
        return tuple(marked[:len(args)]), dict(zip(names, marked[len(args):], strict=True))

    def _keep_weights_unsaved(self, index: int) -> None:
        """While block `index` runs forward, autograd saves its weights (or their transposes) as a note of
        where to find them, not as the tensors: the device copy can go after the forward, and the backward
        reads the copy brought back for it. (Under gradient checkpointing nothing is saved to begin with.)"""
        weights: dict[int, list[torch.nn.Parameter]] = {}  # by storage: a block's plain weights share one
        for parameter, _ in self.host[index]:
            weights.setdefault(parameter.data.untyped_storage().data_ptr(), []).append(parameter)

        def pack(tensor: torch.Tensor) -> Any:
            try:
                sharing = weights.get(tensor.untyped_storage().data_ptr(), []) if tensor.numel() else []
            except (RuntimeError, NotImplementedError):  # a tensor without a plain storage is kept as it is
                return tensor
            parameter = next((p for p in sharing if _views(tensor, p.data)), None)
            if parameter is None or not _same_device(tensor.device, self.device):
                return tensor
            return _WeightView(parameter, tensor)

        hooks = torch.autograd.graph.saved_tensors_hooks(pack, _unpack)
        hooks.__enter__()
        self.saving[index] = hooks

    def _after(self, index: int, module: torch.nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        if _in_backward():
            return None  # recomputed for the backward pass, which runs next with these weights
        saving = self.saving.pop(index, None)
        if saving is not None:
            saving.__exit__(None, None, None)
        marked = None
        if torch.is_grad_enabled():
            # The gradient reaching this block's outputs means its backward is next: bring it back.
            marked = _marked(output if isinstance(output, (tuple, list)) else [output],
                             partial(self._backward_reached, index))
        self._drop(index)
        if marked is None:
            return None
        return type(output)(marked) if isinstance(output, (tuple, list)) else marked[0]

    def _backward_reached(self, index: int) -> None:
        self._bring(index)
        self._send_for(index - 1)

    @contextlib.contextmanager
    def on_host(self) -> Iterator[None]:
        """Every swapped weight readable for the block, as its host copy (what writes a DoRA file reads)."""
        for index in self.host:
            for parameter, host in self.host[index]:
                parameter.data = host
        self.resident.clear()
        try:
            yield
        finally:
            for index in self.host:
                self._drop(index)

    def unhook(self) -> None:
        """The hooks gone, every weight left where it is. They hold this swap, which holds the blocks: without
        them nothing keeps a model alive once its last other reference goes."""
        for hook in self.hooks:
            hook.remove()
        self.hooks.clear()

    def remove(self) -> None:
        """Every swapped block back on the device for good, and the hooks gone."""
        self.unhook()
        for index in self.host:
            self._bring(index)
        self.host.clear()


def weights_on_host(module: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
    """Inside it, `module`'s swapped weights (if any) are readable, in system memory."""
    swap = getattr(module, SWAP_ATTRIBUTE, None)
    return swap.on_host() if isinstance(swap, BlockSwap) else contextlib.nullcontext()


def repeated_blocks(denoiser: torch.nn.Module, classes: Sequence[str]) -> list[torch.nn.Module]:
    """The denoiser's repeated blocks (modules of the named classes), in the order the model declares them,
    which is the order its forward runs them."""
    return [m for m in denoiser.modules() if type(m).__name__ in classes]


def swap_blocks(denoiser: torch.nn.Module, classes: Sequence[str], count: int, device: torch.device) -> BlockSwap:
    """Keep the frozen weights of the last `count` repeated blocks off `device`; `count` must leave one."""
    blocks = repeated_blocks(denoiser, classes)
    if count >= len(blocks):
        raise ValueError(f"has {len(blocks)} repeated blocks; at most {len(blocks) - 1} can be swapped")
    return BlockSwap(blocks, count, device)


def swapped_blocks(config: Any, denoiser: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks whose frozen weights model.blocks_to_swap will keep in system memory; none where its count
    leaves no block on the GPU (which `swap_frozen_blocks` refuses)."""
    from studio.core.families import family

    count = config.model.blocks_to_swap
    if count == 0:
        return []
    blocks = repeated_blocks(denoiser, family(config.model.family).checkpointed_blocks)
    return blocks[len(blocks) - count:] if count < len(blocks) else []


def swap_frozen_blocks(config: Any, denoiser: torch.nn.Module, device: torch.device) -> BlockSwap | None:
    """model.blocks_to_swap applied to the run's denoiser, once it is on `device` with its LoRA (and after data
    parallelism has copied rank 0's weights: the swapped weights are frozen, so it never touches them again)."""
    from studio.core.families import family
    from studio.train.errors import TrainError

    count = config.model.blocks_to_swap
    if count == 0:
        return None
    spec = family(config.model.family)
    try:
        swap = swap_blocks(denoiser, spec.checkpointed_blocks, count, device)
    except ValueError as exc:
        raise TrainError("config", f"model.blocks_to_swap = {count}: the denoiser of {config.model.base} {exc}",
                         "lower model.blocks_to_swap") from None
    # Every rank loads the same base: data parallelism need not broadcast the swapped weights (it would send
    # their empty placeholders).
    swapped = {id(p) for pairs in swap.host.values() for p, _ in pairs}
    ignored = [name for name, p in denoiser.named_parameters() if id(p) in swapped]
    previous = list(getattr(denoiser, "_ddp_params_and_buffers_to_ignore", []))
    torch.nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(
        denoiser, previous + ignored)
    setattr(denoiser, SWAP_ATTRIBUTE, swap)
    return swap
