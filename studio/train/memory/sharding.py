"""`launch.strategy = "fsdp"`: the trained modules split across the ranks with FSDP2 (`fully_shard`).

The trainer shards the modules itself instead of through accelerate's FSDP plugin, for two
reasons: an Accelerator that falls back to the CPU ignores the plugin (its ranks stay plain
gloo data parallel, so CPU tests would never run what GPUs run), and accelerate's FSDP2 path
prepares one model per Accelerator while a DreamBooth that trains the text encoders trains
two or three. Here the same code runs on GPUs and on CPU ranks:

- Units: one per block class named in `studio.core.config.rules.sharding` (children before their
  parents), then each trained module as the root unit of what is left.
- Mixed precision: under bf16 the weights are gathered in bf16 and gradients reduced in fp32;
  the sharded master weights and optimizer state stay fp32.
- Gradient checkpointing: FSDP's checkpoint wrapper around the blocks (every N-th with
  training.checkpointing_interval), not the models' own switch.
- Gradient accumulation: gradients are reduce-scattered after every micro-batch (accelerate's
  `no_sync` leaves these modules alone), so no rank ever holds a whole model's gradients.
- Checkpoints: torch.distributed.checkpoint in `sharded/` of a checkpoint folder (each rank
  writes its shards of the weights and the optimizer state) from accelerate's save hook, read
  back by `Sharding.load` (its index as data only, `studio.train.memory.sharded_reader`). DCP reshards
  when it loads, so a checkpoint resumes on any number of ranks.
- Outputs: the full weights gathered to rank 0's memory and loaded into unsharded copies.

With one process a `fsdp` run shards nothing but keeps this checkpoint format, so it can be
resumed on several ranks (and the other way round).
"""

from __future__ import annotations

import dataclasses
import tempfile
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from studio.core.config.rules.sharding import CHECKPOINTED_BLOCKS, unit_classes
from studio.core.config.schema import TrainConfig
from studio.train.errors import TrainError

SHARDED_DIR = "sharded"  # the DCP folder inside a checkpoint folder
DDP_MARKER = "trainable_0.safetensors"  # what a ddp run's checkpoint holds instead


def unit_modules(model: nn.Module, names: Iterable[str]) -> list[nn.Module]:
    """The modules of `model` whose class is one of `names`, children before their parents."""
    wanted = set(names)
    return [m for m in reversed(list(model.modules())) if type(m).__name__ in wanted]


def unit_sizes(model: nn.Module, names: Iterable[str]) -> dict[str, int]:
    """Parameters per unit as FSDP groups them: a unit owns what no unit inside it owns; the root the rest.

    `benchmarks/count_parameters.py` stores these for the full-size models (the estimate reads
    them); the trainer reports them for the model it shards.
    """
    units = unit_modules(model, names)
    owned: set[int] = set()
    sizes = []
    for unit in units:  # children first, so a parent's count leaves out its children's
        mine = [p for p in unit.parameters() if id(p) not in owned]
        owned.update(id(p) for p in mine)
        sizes.append(sum(p.numel() for p in mine))
    total = sum(p.numel() for p in model.parameters())
    return {"units": len(units), "largest_unit_params": max(sizes, default=0),
            "root_params": total - sum(sizes), "params": total}


def _keep_output_capture(module: nn.Module) -> None:
    """transformers finds which layers' outputs a text encoder can return (`output_hidden_states`, which
    SDXL, SD3 and clip_skip use) by the model's class; FSDP2 gives the module a class of its own.

    transformers up to 5.17 keeps them in a plain dict under the class's name, which it writes and reads itself;
    later versions take the model and find its class's name. (Given the model, the older dict kept the entry
    under the model object, where nothing looks: the sharded encoder returned no hidden states.)"""
    from transformers import PreTrainedModel
    from transformers.utils import output_capturing

    if isinstance(module, PreTrainedModel):
        registry: Any = output_capturing._CAN_RECORD_REGISTRY  # a plain dict, or the model-keyed one
        registry[str(type(module)) if type(registry) is dict else module] = module._can_record_outputs


@contextmanager
def _single_process_quiet() -> Iterator[None]:
    """DCP warns that it "assumes" a single process even when told so (an fsdp run of one process)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's part of a sharded tensor (the tensor itself when it is not sharded)."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if to_local is not None else tensor


class Sharding:
    """What `launch.strategy` changes on this rank; with "ddp" every method leaves the run as it was."""

    def __init__(self, config: TrainConfig, accelerator: Any) -> None:
        self.config = config
        self.accelerator = accelerator
        self.enabled = config.launch.strategy == "fsdp"
        self.sharded = self.enabled and accelerator.num_processes > 1
        self.modules: dict[str, nn.Module] = {}
        self.sizes: dict[str, dict[str, int]] = {}
        self.optimizer: torch.optim.Optimizer | None = None
        self._classes: dict[str, type[nn.Module]] = {}
        self._scratch: tempfile.TemporaryDirectory[str] | None = None

    def warning(self) -> str | None:
        if self.enabled and not self.sharded:
            return ("launch.strategy = \"fsdp\" with one process shards nothing: this run trains unsharded "
                    "(its checkpoints can be resumed on several processes)")
        return None

    # ------------------------------------------------------------ the modules

    def wrap(self, modules: dict[str, nn.Module]) -> None:
        """Checkpoint wrappers and FSDP units on the trained modules, in place (before the optimizer is built)."""
        if not self.enabled:
            return
        self.modules = dict(modules)
        units = unit_classes(self.config)
        for name, module in self.modules.items():
            self._classes[name] = type(module)
            self.sizes[name] = unit_sizes(module, units)
            if self.config.training.gradient_checkpointing:
                self._checkpoint_blocks(module)
        if not self.sharded:
            return
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        # A text encoder's outputs are views of its last hidden state; the families never change them in
        # place, which is what torch warns about.
        warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module \(\w+\) returned a view tensor")
        mesh = init_device_mesh(self.accelerator.device.type, (self.accelerator.num_processes,))
        bf16 = self.config.training.mixed_precision == "bf16"
        # Blocks hand bf16 to each other; a whole module returns fp32, as accelerate's prepared models do
        # (the sample pipelines meet an fp32 VAE on the CPU).
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 \
            else MixedPrecisionPolicy()
        root_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32,
                                           output_dtype=torch.float32) if bf16 else policy
        for module in self.modules.values():
            for unit in unit_modules(module, units):
                fully_shard(unit, mesh=mesh, mp_policy=policy)
            fully_shard(module, mesh=mesh, mp_policy=root_policy)
            _keep_output_capture(module)

    def _checkpoint_blocks(self, module: nn.Module) -> None:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
            CheckpointImpl,
            apply_activation_checkpointing,
            checkpoint_wrapper,
        )

        every = self.config.training.checkpointing_interval
        blocks = [m for m in module.modules() if type(m).__name__ in CHECKPOINTED_BLOCKS]
        chosen = {id(m) for m in blocks[::every]}

        def wrapper(block: nn.Module) -> nn.Module:
            return checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT)

        apply_activation_checkpointing(module, checkpoint_wrapper_fn=wrapper,
                                       check_fn=lambda m: id(m) in chosen)

    def params_held(self) -> int:
        """Trained parameters this rank holds (its shards)."""
        return sum(local(p).numel() for m in self.modules.values() for p in m.parameters() if p.requires_grad)

    def report(self) -> dict[str, Any]:
        """What the run_started event says about the sharding (a collective call when sharded)."""
        if not self.enabled:
            return {}
        held = torch.tensor([[self.params_held()]], dtype=torch.int64, device=self.accelerator.device)
        by_rank = [int(v) for v in self.accelerator.gather(held).cpu().flatten().tolist()] if self.sharded \
            else [int(held.item())]
        return {"strategy": "fsdp", "processes": self.accelerator.num_processes, "params_by_rank": by_rank,
                "modules": self.sizes}

    def weight_sum(self, params: Iterable[torch.Tensor]) -> float:
        """The sum of the trained weights: with sharding, of every rank's shards (a collective call)."""
        total = torch.tensor(sum(float(local(p).detach().double().sum()) for p in params), dtype=torch.float64,
                             device=self.accelerator.device)
        if self.sharded:
            total = self.accelerator.reduce(total, reduction="sum")
        return float(total.item())

    def checksums(self, params: Iterable[torch.Tensor]) -> list[float]:
        """The sum of the trained weights as each rank holds them (a sharded run: all shards), gathered from
        every rank (a collective call): the run's end event says them, and the ranks must agree."""
        mine = torch.tensor([[self.weight_sum(params)]], dtype=torch.float64, device=self.accelerator.device)
        return [float(v) for v in self.accelerator.gather(mine).cpu().flatten().tolist()]

    # ------------------------------------------------------------ checkpoints

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Save the weights and optimizer state with DCP in accelerate's save hook (`load` reads them back)."""
        if not self.enabled:
            return
        self.optimizer = optimizer
        self.accelerator.register_save_state_pre_hook(self._save_hook)

    def _container(self) -> nn.Module:
        # One module holding every trained one, so the optimizer's state maps to names like "unet.conv_in.weight".
        return nn.ModuleDict(self.modules)

    def _save_hook(self, models: list[nn.Module], weights: list[Any], output_dir: str) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        assert self.optimizer is not None
        model_state, optimizer_state = get_state_dict(self._container(), self.optimizer)
        with _single_process_quiet():
            dcp.save({"model": model_state, "optimizer": optimizer_state},
                     checkpoint_id=str(Path(output_dir) / SHARDED_DIR), no_dist=not self.sharded)

    def load(self, checkpoint: Path) -> None:
        """The weights and optimizer state of a sharded checkpoint, resharded for this run's ranks (collective)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import (
            StateDictOptions,
            get_state_dict,
            set_model_state_dict,
            set_optimizer_state_dict,
        )

        from studio.train.memory.sharded_reader import DataOnlyReader

        if not self.enabled:
            return
        assert self.optimizer is not None
        container = self._container()
        reader = DataOnlyReader(checkpoint / SHARDED_DIR)
        model_state, optimizer_state = get_state_dict(container, self.optimizer)
        # Weights that never had a gradient (a text encoder's last layer, which SDXL does not read) have no
        # optimizer state in the checkpoint; they get none back, as in the run that saved it.
        saved = set(reader.read_metadata().state_dict_metadata)
        state: Any = optimizer_state["state"]
        optimizer_state["state"] = {name: values for name, values in state.items()
                                    if all(f"optimizer.state.{name}.{key}" in saved for key in values)}
        # DCP loads in place into the tensors of these dicts, resharded for this run's ranks.
        with _single_process_quiet():
            dcp.load({"model": model_state, "optimizer": optimizer_state}, storage_reader=reader,
                     no_dist=not self.sharded)
        set_model_state_dict(container, model_state)
        set_optimizer_state_dict(container, self.optimizer, optimizer_state, options=StateDictOptions(strict=False))

    def check_checkpoint(self, folder: Path) -> None:
        """A checkpoint of the other strategy cannot be resumed: say so before anything loads."""
        written_by = "fsdp" if (folder / SHARDED_DIR).is_dir() else "ddp" if (folder / DDP_MARKER).is_file() else None
        wanted = self.config.launch.strategy
        if written_by is not None and written_by != wanted:
            raise TrainError("config", f"the checkpoint {folder} was written with launch.strategy = \"{written_by}\", "
                             f"and this run has launch.strategy = \"{wanted}\"",
                             f"set launch.strategy = \"{written_by}\" in {folder.parents[1] / 'config.toml'} "
                             "and resume again")

    # ------------------------------------------------------------ samples and outputs

    def sample_dir(self, run_dir: Path) -> Path | None:
        """Where this rank writes sample images: rank 0 into the run, other ranks of a sharded run
        (every rank runs the sharded forward passes) into a scratch folder; None: no samples here."""
        if self.accelerator.is_main_process:
            return run_dir
        if not self.sharded:
            return None
        if self._scratch is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="studio-samples-")
        return Path(self._scratch.name)

    def gather_full(self) -> dict[str, nn.Module]:
        """Unsharded copies of the trained modules on rank 0 (in CPU memory); {} elsewhere. Collective."""
        if not self.sharded:
            return {}
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        out: dict[str, nn.Module] = {}
        for name, module in self.modules.items():
            state = get_model_state_dict(module, options=options)  # every rank sends; rank 0 receives
            if self.accelerator.is_main_process:
                out[name] = self._unsharded_copy(name, module, state)
        return out

    def full_components(self, components: Any, denoiser_name: str, encoder_names: Sequence[str]) -> Any:
        """`components` with whole trained modules: a sharded run gathers them to rank 0 (a collective call)."""
        full = self.gather_full()
        if not full:
            return components
        encoders = [full.get(encoder_names[i], e) if i < len(encoder_names) else e
                    for i, e in enumerate(components.text_encoders)]
        return dataclasses.replace(components, denoiser=full[denoiser_name], text_encoders=encoders)

    def _unsharded_copy(self, name: str, sharded: nn.Module, state: dict[str, Any]) -> nn.Module:
        cls: Any = self._classes[name]
        with torch.device("meta"):
            fresh = cls.from_config(sharded.config) if hasattr(cls, "from_config") else cls(sharded.config)
        fresh.load_state_dict(state, strict=True, assign=True)
        # Buffers outside the state dict (CLIP's position ids) are not sharded: copy them over.
        buffers = {n.replace("_checkpoint_wrapped_module.", ""): b for n, b in sharded.named_buffers()}
        for buffer_name, buffer in list(fresh.named_buffers()):
            if buffer.is_meta:
                owner, _, leaf = buffer_name.rpartition(".")
                fresh.get_submodule(owner).register_buffer(leaf, buffers[buffer_name].detach().cpu(),
                                                           persistent=False)
        return fresh.train(sharded.training)

    def close(self) -> None:
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None
