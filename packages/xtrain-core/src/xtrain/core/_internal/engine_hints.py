"""What an Accelerate (or Lightning Fabric) method is called on the Engine.

People port scripts to the Engine from Accelerate and Fabric, and every name they bring along used to end in a bare
``AttributeError``. ``Engine.__getattr__`` raises :func:`missing_engine_attribute` instead: Python's own sentence,
followed, for a name in :data:`EQUIVALENTS`, by the Engine's equivalent as code to paste. A test checks that no key
of the table is a real attribute of the Engine, so a hint can never hide one.
"""

from __future__ import annotations

__all__ = ["EQUIVALENTS", "missing_engine_attribute"]

_PREPARE = ("model, optimizer = engine.setup(model, optimizer)\n"
            "loader = engine.setup_dataloaders(loader)\n"
            "(a learning-rate scheduler needs no setup: build it on the set-up optimizer)")
_GATHER = ("rows = engine.gather_for_metrics(t)  # concatenated, the sampler's repeated samples dropped\n"
           "rows = engine.all_gather(t).reshape(-1, *t.shape[1:])  # all_gather stacks; nothing dropped")
_SAVE_STATE = ('state = {"model": model, "optimizer": optimizer, "scheduler": scheduler, "loader": loader}\n'
               "engine.save(path, state)    # a set-up loader in the state saves its position\n"
               "engine.load(path, state)    # or engine.resume(folder, state): the newest complete checkpoint")
_ACCUMULATE = ("with engine.no_backward_sync(model, enabled=not last_micro_batch):  # forward and backward\n"
               "    engine.backward(loss_fn(model(x), y) / K)\n"
               "(step the optimizer, and zero its gradients, every K batches)")
_TRACKERS = ("the Engine has no trackers: log with your tracker's own API, on rank 0 only:\n"
             "if engine.is_global_zero:\n"
             "    tracker.log(...)\n"
             "(end_training needs nothing)")
_SAVE_MODEL = ('engine.save(path, {"model": model})\n'
               "torch.save(model.module.state_dict(), path)  # or a plain state dict")

EQUIVALENTS: dict[str, str] = {
    # Accelerate: setup
    "prepare": _PREPARE,
    "prepare_model": "model = engine.setup(model)",
    "prepare_optimizer": "optimizer = engine.setup_optimizers(optimizer)",
    "prepare_data_loader": "loader = engine.setup_dataloaders(loader)",
    "prepare_scheduler": "a learning-rate scheduler needs no setup: build it on the set-up optimizer",
    "unwrap_model": "model.module  # the module that was passed to engine.setup",
    # Accelerate: collectives
    "gather": _GATHER,
    "reduce": 'engine.all_reduce(t, reduce_op="sum")  # Accelerate\'s default is sum, the Engine\'s is mean',
    "split_between_processes": ("loader = engine.setup_dataloaders(loader)  # shards across ranks\n"
                                "shard = data[engine.global_rank::engine.world_size]  # or by hand"),
    "wait_for_everyone": "engine.barrier()",
    # Accelerate: who and where
    "is_main_process": "engine.is_global_zero",
    "is_local_main_process": "engine.local_rank == 0",
    "main_process_first": "with engine.rank_zero_first():",
    "local_main_process_first": "with engine.rank_zero_first(local=True):",
    "num_processes": "engine.world_size",
    "process_index": "engine.global_rank",
    "local_process_index": "engine.local_rank",
    "use_distributed": "engine.world_size > 1",
    "is_last_process": "engine.global_rank == engine.world_size - 1",
    "on_main_process": "if engine.is_global_zero:  # around the call (a decorator in Accelerate)",
    "on_local_main_process": "if engine.local_rank == 0:  # around the call (a decorator in Accelerate)",
    "gather_object": "[x for part in engine.strategy.all_gather_object(obj) for x in part]  # every rank's list",
    "set_seed": ("engine.seed_everything(seed)  # under ddp it also sets the distributed shuffle order, which "
                 "torch.manual_seed does not"),
    # Accelerate: the step
    "clip_grad_norm_": "engine.clip_gradients(model, optimizer, max_norm=...)",
    "clip_grad_value_": "engine.clip_gradients(model, optimizer, clip_val=...)",
    "accumulate": _ACCUMULATE,
    "gradient_accumulation_steps": _ACCUMULATE,
    "no_sync": "with engine.no_backward_sync(model):",
    "sync_gradients": _ACCUMULATE,
    "unscale_gradients": ("engine.clip_gradients(model, optimizer, max_norm=...) unscales first; gradients are "
                          "unscaled before optimizer.step() in any case"),
    "free_memory": "del model, optimizer; gc.collect(); torch.cuda.empty_cache()",
    # Accelerate: checkpoints
    "save_state": _SAVE_STATE,
    "load_state": _SAVE_STATE,
    "skip_first_batches": ("put the set-up loader in the saved state: engine.load(path, {..., \"loader\": loader}) "
                           "restores its position (epoch and batch), so the next pass starts after the batches "
                           "already seen"),
    "save_model": _SAVE_MODEL,
    "get_state_dict": "model.module.state_dict()",
    "register_for_checkpointing": ("put the object (anything with state_dict and load_state_dict) in the state "
                                   "passed to engine.save and engine.load"),
    # Accelerate: trackers
    "log": _TRACKERS,
    "init_trackers": _TRACKERS,
    "get_tracker": _TRACKERS,
    "end_training": _TRACKERS,
    # Lightning Fabric
    "load_raw": ("state_dict = engine.load(path)  # a plain file: its whole dict\n"
                 "model.load_state_dict(state_dict)  # a set-up module loads into the original"),
    "log_dict": _TRACKERS,
    "init_module": "build the model as usual: model = engine.setup(model) converts and moves it",
}
"""Accelerate's and Fabric's names that the Engine lacks, each with the Engine's equivalent as code."""


def missing_engine_attribute(name: str) -> AttributeError:
    """The error for ``engine.<name>`` when the Engine has no such attribute.

    The message starts with Python's own sentence, so it reads (and matches) like any ``AttributeError``; for a
    name ported from Accelerate or Fabric it goes on with the Engine's equivalent. Private names (``_x``) get the
    plain sentence: ``copy``, ``pickle`` and ``hasattr`` probe those and expect nothing more.

    Args:
        name: The attribute that was looked up.

    Returns:
        The ``AttributeError`` to raise (its ``name`` is set, as Python's own is).
    """
    message = f"'Engine' object has no attribute '{name}'"
    hint = None if name.startswith("_") else EQUIVALENTS.get(name)
    if hint is not None:
        code = "\n".join(f"    {line}" for line in hint.splitlines())
        message += f". It is Accelerate's or Fabric's; on the Engine, write:\n{code}"
    error = AttributeError(message)
    error.name = name
    return error
