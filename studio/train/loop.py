"""The training loop: setup, steps, events, samples, checkpoints, stop and resume.

Every rank runs this code; collective calls (reduce, gather, save_state) happen on
every rank at the same step, and only rank 0's reporter writes files.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from studio.core.config.schema import TrainConfig
from studio.core.estimate.sampling_plan import sampling_needs_tiling
from studio.core.runs.events import Checkpoint, EpochSaved, RunFinished
from studio.train.compilation import (
    CompiledDenoiser,
    begin_step,
    compile_denoiser,
    eager,
    give_grads,
    keeps_grads,
)
from studio.train.components import Components, check_tokenizers
from studio.train.data.batches import (
    EpochPlan,
    MicroBatches,
    latent_draws,
    micro_batch_loader,
    stream_rng,
    total_steps,
)
from studio.train.data.cache import LatentCache, TextCache
from studio.train.data.caching_phase import HOLD_DEVICE, fill_caches, holds_denoiser, offload_frozen
from studio.train.data.controls import (
    REFERENCES,
    batch_references,
    edit_caption_keys,
    encode_captions,
    sample_controls,
)
from studio.train.data.items import TrainItem, collect_items
from studio.train.data.masks import step_loss
from studio.train.data.prefetch import Prefetcher
from studio.train.errors import TrainError
from studio.train.extras.validation import ValidationLoss, split_items, validate_after_step, validation_due
from studio.train.families import FamilyAdapter, adapter_for
from studio.train.families.schemes import noise_for_rank
from studio.train.memory.block_swap import BlockSwap
from studio.train.memory.fp8 import store_in_float8
from studio.train.memory.grad_checkpointing import enable_gradient_checkpointing
from studio.train.memory.placement import FrozenOffload
from studio.train.memory.sharding import Sharding
from studio.train.memory.spill import SpillWatch, watch_cards
from studio.train.memory.transfer import to_device
from studio.train.optim import build_optimizer, build_scheduler, param_groups
from studio.train.progress.announce import announce
from studio.train.progress.hold import StepHold
from studio.train.progress.phase_clock import PhaseClock, device_sync
from studio.train.progress.reporting import Reporter
from studio.train.progress.skipped_steps import SkippedSteps
from studio.train.progress.step_meter import Report, StepMeter, step_cost
from studio.train.runtime import (
    StoppedBeforeTraining,
    StopSignal,
    gpu_total_mb,
    warn_before_loading,
    weight_dtype,
)
from studio.train.samples import SamplingPlan, ensure_class_images, make_samples
from studio.train.saving.checkpoints import register_hooks, save_checkpoint
from studio.train.saving.outputs import check_kohya_layout, save_epoch_lora, save_outputs
from studio.train.saving.resume import checkpoint_state, refuse_past_the_end, resume_state
from studio.train.weights.ema import for_samples, weight_average


class Trainer:
    """One run of one config in one run folder, on this rank."""

    def __init__(self, config: TrainConfig, run_dir: Path, accelerator: Any, reporter: Reporter,
                 resume: bool = False) -> None:
        self.config = config
        self.run_dir = run_dir
        self.accelerator = accelerator
        self.reporter = reporter
        self.resume = resume
        self.stop = StopSignal(run_dir)
        self.hold = StepHold(run_dir, self.stop, accelerator)  # tests only: STUDIO_TEST_HOLD_STEPS
        self.step = 0
        self.epoch = 0
        # The step of the checkpoint this leg resumed from or saved last: the state it holds is this one's.
        self.saved_step: int | None = None
        self.adapter: FamilyAdapter = adapter_for(config)
        self.items: list[TrainItem] = []
        self.latent_cache: LatentCache | None = None
        self.text_cache: TextCache | None = None
        self.offload = FrozenOffload(accelerator.device)
        self.sharding = Sharding(config, accelerator)
        self.compiled: CompiledDenoiser | None = None
        self.block_swap: BlockSwap | None = None  # model.blocks_to_swap, once the denoiser comes to the device
        self.stop_agreed = False  # what the last read-back said (several processes)
        self.spill: SpillWatch | None = None  # Windows' spill of GPU memory into system memory (setup)
        self.started_at = time.time()  # the outputs' training date (ss_training_started_at)
        self.clock = PhaseClock(device_sync(accelerator.device))  # where the run's time goes (run_finished's phases)
        self.skipped = SkippedSteps()  # steps fp16's gradient scaler skipped (run_finished's skipped_steps)

    @property
    def offload_device(self) -> torch.device:
        """Where frozen modules wait between uses (the VAE with cached latents, encoders with cached text)."""
        return self.offload.offload_device

    # ------------------------------------------------------------ setup

    def setup(self) -> None:
        acc, config = self.accelerator, self.config
        if acc.is_main_process and self.resume:
            self.stop.clear_stale()
        self.stop.install()
        from accelerate.utils import set_seed

        set_seed(config.training.seed)
        if self.resume and config.training.length[0] == "steps":  # known before the model loads
            refuse_past_the_end(self.run_dir, config.training.length[1], config)
        warn_before_loading(config, acc.device, self.sharding.warning(), self.reporter.warn)
        self.reporter.phase("loading", 0, 1, f"loading {config.model.base}")
        self.spill = watch_cards(acc.device)
        self.dtype = weight_dtype(config, acc)
        self.sampling_plan = SamplingPlan(self.offload, sampling_needs_tiling(config, gpu_total_mb(acc.device)),
                                          acc.autocast)
        if holds_denoiser(config, self.sharding.enabled):  # to the GPU once the caches are filled
            self.adapter.denoiser_home = HOLD_DEVICE
        with self.clock.timed("loading"):
            self.components: Components = self.adapter.load(acc.device, self.dtype)
        check_tokenizers(self.components.tokenizers, config.model.base)  # a lost vocabulary trains on nothing
        self.denoiser_params = sum(p.numel() for p in self.components.denoiser.parameters())
        self.reporter.phase("loading", 1, 1, "model loaded", elapsed_s=round(self.clock.seconds["loading"], 2))
        with self.clock.timed("class images"):
            self.config = ensure_class_images(self.adapter, self.components, self.sampling_plan, config,
                                              self.run_dir, acc.is_main_process, self.reporter)
        self.adapter.config = self.config
        acc.wait_for_everyone()
        self.items, held_out = split_items(collect_items(self.config, self.reporter.warn), self.config, self.reporter.warn)
        self.sampling_plan.controls = sample_controls(self.config, self.items)  # what samples edit, if anything
        self._prepare_models()
        self.compiled = compile_denoiser(self.components.denoiser, config.training.compile, config.model.family)
        self.plan = EpochPlan(self.items, config.training.batch_size, acc.num_processes, config.training.seed)
        self.total = total_steps(self.plan, config.training.gradient_accumulation, config.training.length)
        if self.resume:  # epochs: known once the items are counted, still before the caches fill
            refuse_past_the_end(self.run_dir, self.total, config, self.plan.global_batch)
        self.meter = StepMeter(acc, self.total, step_cost(config, self.denoiser_params, acc.device))
        groups = param_groups(self.trainable[0], self.trainable[1], config.training)
        optimizer = build_optimizer(groups, config.training, acc.device.type == "cuda", self.reporter.warn)
        self.scheduler = build_scheduler(optimizer, config.training, self.total, self.reporter.warn)
        self.latent_cache, self.text_cache = fill_caches(self)  # the denoiser may wait off the GPU meanwhile
        self.validation = ValidationLoss(self, held_out)  # held-out latents and embeddings, before offloading
        with self.clock.timed("moving models"):
            offload_frozen(self)  # the encoders leave, then the base is quantized onto the GPU (quantized_base)
        if self.sharding.enabled:  # sharded already; DCP saves the weights and the optimizer state
            self.wrapped, self.optimizer = list(self.train_modules), optimizer
            self.sharding.attach(optimizer)
        else:
            prepared = acc.prepare(*self.train_modules, optimizer)
            self.wrapped, self.optimizer = list(prepared[:-1]), prepared[-1]
        register_hooks(acc)
        self.ema = weight_average(config, self.trainable, acc.device)
        if self.resume:
            self._load_checkpoint()

    def _prepare_models(self) -> None:
        from diffusers.training_utils import cast_training_params

        c, method, training = self.components, self.config.method, self.config.training
        encoders = self.adapter.trainable_encoders(c) if method.train_text_encoder else []
        if method.kind == "lora":
            self.adapter.add_lora(c)
            check_kohya_layout(self.adapter, c)  # a layer the kohya file cannot name fails now, not after training
        else:
            c.denoiser.to(dtype=torch.float32).requires_grad_(True)
            for index, encoder in enumerate(encoders):
                encoder.to(dtype=torch.float32).requires_grad_(True)
                for part in self.adapter.unused_encoder_parts(index, encoder):  # no gradient ever reaches them
                    part.requires_grad_(False)
        modules = [c.denoiser, *encoders]
        cast_training_params(modules, dtype=torch.float32)
        if self.config.model.fp8_base:
            with self.clock.timed("fp8 conversion"):
                store_in_float8(c.denoiser, self.dtype)  # after the LoRA: its layers stay trainable
        if training.gradient_checkpointing and not self.sharding.enabled:  # FSDP wraps the blocks itself
            enable_gradient_checkpointing(c.denoiser, training.checkpointing_interval)
            for encoder in encoders:
                encoder.gradient_checkpointing_enable()  # type: ignore[operator]
        for module in modules:
            module.train()
        names = [self.adapter.denoiser_name, *self.adapter.text_encoder_names[:len(encoders)]]
        self.sharding.wrap(dict(zip(names, modules, strict=True)))
        self.train_modules = modules
        denoiser_params = [p for p in c.denoiser.parameters() if p.requires_grad]
        encoder_params = [p for e in encoders for p in e.parameters() if p.requires_grad]
        self.trainable = (denoiser_params, encoder_params)

    def _load_checkpoint(self) -> None:
        state = resume_state(self.run_dir, self.accelerator, self.scheduler, self.sharding, self.ema, self.reporter,
                             self.total, self.plan.global_batch, self.config.training.gradient_accumulation,
                             self.config)
        if state is not None:
            self.step, self.epoch = int(state["step"]), int(state.get("epoch", 0))
            self.saved_step = self.step

    # ------------------------------------------------------------ the loop

    def run(self) -> RunFinished:
        try:
            with self.stop.during_setup(self.reporter, self.accelerator.num_processes, self.run_dir, self.resume):
                self.setup()
        except StoppedBeforeTraining as stopped:
            self.step = stopped.step
            return stopped.finished
        announce(self)
        training = self.config.training
        start = self.step * training.gradient_accumulation
        data = MicroBatches(self.plan, self.config.dataset, self.accelerator.process_index, start,
                            max(0, self.total * training.gradient_accumulation - start),
                            with_pixels=self.latent_cache is None)
        loader = micro_batch_loader(data, training.dataloader_workers, self.accelerator.device.type == "cuda")
        # Without worker processes a thread reads the next batches while the step runs.
        batches = Prefetcher(loader) if training.dataloader_workers == 0 else iter(loader)
        try:
            return self._train(batches)
        finally:
            if isinstance(batches, Prefetcher):
                batches.close()

    def _train(self, batches: Any) -> RunFinished:
        scheme = self.adapter.noise_scheme(self.components)
        # The prepared (possibly DDP-wrapped) modules stand in for the ones they wrap; frozen ones stay.
        swap = {id(module): wrapped for module, wrapped in zip(self.train_modules, self.wrapped, strict=True)}
        train_components = replace(self.components, denoiser=self.wrapped[0],
                                   text_encoders=[swap.get(id(e), e) for e in self.components.text_encoders])
        if self.step == 0 and self.config.sampling.at_start:  # the base model's pictures (a resumed run is past 0)
            self._samples()
        self.meter.start()
        with self.clock.timed("steps"):
            return self._steps(batches, scheme, train_components)

    def _steps(self, batches: Any, scheme: Any, train_components: Components) -> RunFinished:
        while self.step < self.total:
            if self.reporter.lost is not None:
                raise self.reporter.lost  # an event was not written (a sample's, say): no training unrecorded
            # One process looks at the STOP file and signals every step (no GPU involved); several processes
            # agree at each read-back, so they all stop at the same step.
            if self.stop.local() if self.accelerator.num_processes == 1 else self.stop_agreed:
                return self._finish("stopped", self.stop.reason())
            compiling = self._train_step(batches, scheme, train_components)
            held = self.hold.due(self.step)
            forced = self.step in (1, self.total) or compiling is not None or held or self._actions_due()
            if self.meter.due(self.step, forced):
                self._report(self.meter.flush(self.stop.local()), compiling)
            with self.meter.paused():
                self._after_step(self.epoch)
                if held:
                    self.reporter.flush()  # the held step's event is on disk before the wait
                    self.stop_agreed = self.hold.wait(self.step, self.reporter.warn) or self.stop_agreed
        return self._finish("completed")

    def _train_step(self, batches: Any, scheme: Any, components: Components) -> float | None:
        """One optimizer step over its micro-batches, queued on the device without waiting for it; the time the
        compiling of a new image size started, when this step brought one."""
        acc, training = self.accelerator, self.config.training
        accum = training.gradient_accumulation
        losses, images, image_pixels = [], 0, 0
        compiling: float | None = None
        begin_step(self.compiled)
        keep_grads = keeps_grads(self.compiled, accum)
        if keep_grads:
            give_grads([p for g in self.trainable for p in g])
        for micro in range(accum):
            batch = next(batches)
            self.epoch = int(batch["epoch"])
            height, width = batch["target_size"]
            if self.compiled is not None and self.compiled.is_new_shape((height, width)) and compiling is None:
                compiling = time.monotonic()
                self.reporter.phase("compiling", 0, 1, f"compiling {self.compiled.what} for {width}x{height} "
                                    "images; this step takes longer")
            with contextlib.ExitStack() as stack:
                if micro != accum - 1:
                    for module in self.wrapped:
                        stack.enter_context(acc.no_sync(module))
                loss = self._loss(batch, scheme, components)
                acc.backward(loss / accum)
            losses.append(loss.detach().float())
            images += len(batch["items"])
            image_pixels += len(batch["items"]) * height * width
        if training.max_grad_norm > 0:
            acc.clip_grad_norm_([p for g in self.trainable for p in g], training.max_grad_norm)
        scale = self.skipped.scale_before(acc)
        self.optimizer.step()
        skipped = self.skipped.was_skipped(acc, scale)
        lr = float(self.scheduler.get_last_lr()[0])  # the rate this step used, before the schedule moves on
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=not keep_grads)
        self.step += 1
        if self.ema is not None:
            self.ema.update(self.step)
        loss_mean = torch.stack(losses).mean()
        self.meter.record(self.step, self.epoch, lr, loss_mean, images, image_pixels, skipped)
        return compiling

    def _report(self, report: Report, compiling: float | None) -> None:
        """Write what a read-back brought: the compile time, the step events, a diverged loss."""
        if compiling is not None and self.compiled is not None:
            seconds = time.monotonic() - compiling
            self.clock.move(seconds, "steps", "compiling")
            self.reporter.phase("compiling", 1, 1, f"compiled {self.compiled.what} in {seconds:.1f} s",
                                elapsed_s=round(seconds, 2))
        for event in report.steps:
            self.reporter.emit(event)
        self.skipped.record([event.step for event in report.steps], report.skipped)
        spilled = self.spill.check(report.steps) if self.spill is not None else None
        if spilled is not None:
            self.reporter.warn(spilled[0], None, spilled[1])
        if report.not_finite is not None:
            step, value = report.not_finite
            raise TrainError("nan", f"the loss became {value} at step {step}",
                             "lower training.learning_rate, use bf16 instead of fp16, or set "
                             "training.max_grad_norm to 1.0")
        if self.skipped.hopeless:  # after the steps' events: the plot keeps the loss that looked alive
            raise self.skipped.error()
        self.stop_agreed = report.stop

    def _loss(self, batch: dict[str, Any], scheme: Any, components: Components) -> torch.Tensor:
        acc, adapter = self.accelerator, self.adapter
        device = acc.device
        if self.latent_cache is not None:
            latents = self.latent_cache.batch(batch["items"], device, torch.float32)
        else:
            # A new sample of each image's latents every step, drawn from its micro-batch and its place in the
            # global batch (as its noise is), so N ranks draw what one rank with the same global batch draws.
            size = len(batch["items"])
            keys = [(1, int(batch["index"]), 0, acc.process_index * size + position) for position in range(size)]
            draws = latent_draws(self.config.dataset, self.config.training.seed, keys)
            with torch.no_grad():
                pixels = to_device(batch["pixels"], device)
                latents = adapter.encode_images(components, pixels, draws).float()
        items = [self.items[index] for index in batch["items"]]
        if self.text_cache is not None:  # a caption that sees its pair's controls is cached with them
            cached_text = self.text_cache.batch(batch["captions"], edit_caption_keys(adapter, batch, items))
            cond = {k: to_device(v, device) for k, v in cached_text.items()}
        else:
            with torch.set_grad_enabled(self.config.method.train_text_encoder):
                cond = encode_captions(adapter, components, batch["captions"], items, batch.get("controls"))
        cond = adapter.extra_conditioning(batch, cond, device)
        cached = self.latent_cache.control_batch(batch["items"], device) if self.latent_cache is not None else None
        references = batch_references(adapter, components, batch, cached, device)
        if references is not None:  # edit pairs: the controls' latents, given to the denoiser beside the target's
            cond[REFERENCES] = references
        # One generator for the global batch, the same on every rank (0 where the rank once was).
        seed = int(stream_rng(self.config.training.seed, 3, int(batch["index"]), 0).integers(2**62))
        generator = torch.Generator("cpu").manual_seed(seed)
        noised = noise_for_rank(scheme, latents, generator, acc.process_index, acc.num_processes)
        with acc.autocast():
            prediction = adapter.predict(components.denoiser, noised.noisy, noised.timesteps, cond)
        return step_loss(scheme, prediction, noised, batch, self.latent_cache)  # masked where dataset.masks says

    def _due(self) -> tuple[bool, bool, bool]:
        """Whether this step samples, writes a checkpoint, or ends an epoch when epochs save their LoRA."""
        sampling, output, step = self.config.sampling, self.config.output, self.step
        return (bool(sampling.every_n_steps and step % sampling.every_n_steps == 0),
                bool(output.save_every_n_steps and step % output.save_every_n_steps == 0),
                bool(output.save_every_n_epochs and self._epochs_done(step) > self._epochs_done(step - 1)))

    def _actions_due(self) -> bool:
        """Whether `_after_step` does something at this step (the losses are read back first)."""
        return validation_due(self) or any(self._due())

    def _after_step(self, epoch: int) -> None:
        samples, checkpoint, epoch_ended = self._due()
        with eager(self.compiled):  # held-out images in eval mode without gradients would compile anew
            validate_after_step(self)
        if samples:
            self._samples()
        if checkpoint and self.step < self.total:
            self._checkpoint(epoch)
        finished = self._epochs_done(self.step)
        if epoch_ended and self.step < self.total and finished % self.config.output.save_every_n_epochs == 0:
            self._save_epoch(finished)

    def _epochs_done(self, step: int) -> int:
        """Epochs completed once `step` optimizer steps are done (their micro-batches counted)."""
        return step * self.config.training.gradient_accumulation // self.plan.batches_per_epoch

    def _save_epoch(self, epoch: int) -> None:
        acc = self.accelerator
        self.reporter.phase("saving", 0, 1, f"the LoRA of epoch {epoch}")
        if acc.is_main_process:
            with self.clock.timed("saving"):
                paths = save_epoch_lora(self.adapter, self.components, self.run_dir, self.items, self.step, epoch,
                                        self.started_at)
            self.reporter.emit(EpochSaved(step=self.step, epoch=epoch, outputs=[str(p) for p in paths]))
        acc.wait_for_everyone()

    def _samples(self) -> None:
        run_dir = self.sharding.sample_dir(self.run_dir)  # every rank of a sharded run runs the forward passes
        if run_dir is not None:
            with self.clock.timed("sampling"), eager(self.compiled), for_samples(self.ema, self.config):
                make_samples(self.adapter, self.components, self.sampling_plan, run_dir, self.step, self.reporter)
        self.accelerator.wait_for_everyone()

    def _checkpoint(self, epoch: int) -> None:
        if self.saved_step == self.step:
            # This step's checkpoint is there already (Stop pressed during its save, or a resumed run stopped
            # before its first step): saving it again deleted the complete one first, and a Kill or a power cut
            # meanwhile left the run without it.
            return
        self.reporter.phase("saving", 0, 1, f"checkpoint at step {self.step}")
        state = checkpoint_state(self.step, epoch, self.total, self.plan.global_batch,
                                 self.config.training.gradient_accumulation, self.config.training.optimizer)
        with self.clock.timed("saving"):
            folder = save_checkpoint(self.accelerator, self.run_dir, state, self.config.output.keep_last,
                                     self.scheduler, extra=self.ema.save if self.ema is not None else None)
        self.saved_step = self.step
        self.reporter.emit(Checkpoint(step=self.step, path=str(folder)))

    def _finish(self, status: str, message: str = "") -> RunFinished:
        acc = self.accelerator
        # Steps not read back yet (a stop between read-backs of a single process) are reported first.
        self._report(self.meter.flush(False), None)
        outputs: list[str] = []
        if status == "stopped":
            self._checkpoint(self.epoch)
        else:
            if (every := self.config.sampling.every_n_steps) and self.step % every:
                self._samples()
            self.reporter.phase("saving", 0, 1, "writing the outputs")
            components = self.sharding.full_components(self.components, self.adapter.denoiser_name,
                                                       self.adapter.text_encoder_names)
            if acc.is_main_process:
                with self.clock.timed("saving"):
                    outputs = [str(p) for p in save_outputs(self.adapter, components, self.run_dir, self.items,
                                                            self.step, self.started_at, self.reporter.warn,
                                                            self.ema)]
            del components
            acc.wait_for_everyone()
        self.stop.uninstall()
        self.sharding.close()
        return RunFinished(status=status, outputs=outputs, step=self.step, message=message,
                           weight_checksums=self.sharding.checksums(p for group in self.trainable for p in group))
