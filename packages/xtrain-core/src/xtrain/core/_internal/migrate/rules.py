"""The one table of ``xtrain migrate``: every Lightning name, argument and idiom it knows, and what xtrain has instead.

``docs/migration.md`` is generated from this table (``python -m xtrain.core.migrate --write-docs``) and a test keeps
the two equal. Names are canonical: ``pytorch_lightning`` is read as ``lightning.pytorch`` and ``lightning_fabric`` as
``lightning.fabric``; a name is found under any submodule of the module it is listed in
(``lightning.pytorch.callbacks.model_checkpoint.ModelCheckpoint`` matches ``lightning.pytorch.callbacks.ModelCheckpoint``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["RULES", "TRAINER_FN", "Action", "Rule", "Section"]


class Section(StrEnum):
    MODULE = "module"
    NAME = "name"
    TRAINER_ARG = "trainer argument"
    ARGUMENT = "argument"
    ENGINE = "Fabric to Engine"
    MODULE_API = "LightningModule"
    TRAINER_API = "Trainer attribute"
    PRECISION = "precision value"
    BEHAVIOUR = "behaviour"


class Action(StrEnum):
    SAME = "same"            # kept as it is
    RENAME = "rename"        # replaced by ``xtrain``
    TRANSLATE = "translate"  # rewritten by code in ``transform.py`` (the note says how)
    DROP = "drop"            # removed with the statements that use it
    MISSING = "missing"      # left in place with a ``# xtrain migrate:`` comment saying what to do
    DOC = "doc"              # a difference in behaviour: nothing to rewrite, documented


@dataclass(frozen=True)
class Rule:
    section: Section
    lightning: str
    action: Action
    xtrain: str | None = None
    note: str = ""


def _r(section: Section, lightning: str, xtrain: str | None = None, note: str = "", *,
       action: Action | None = None) -> Rule:
    if action is None:
        action = Action.MISSING if xtrain is None else Action.RENAME
    return Rule(section, lightning, action, xtrain, note)


M, N, T, E, A, TA, P, B, AR = (Section.MODULE, Section.NAME, Section.TRAINER_ARG, Section.ENGINE, Section.MODULE_API,
                               Section.TRAINER_API, Section.PRECISION, Section.BEHAVIOUR, Section.ARGUMENT)
SAME, TR, DROP, MISS, DOC = Action.SAME, Action.TRANSLATE, Action.DROP, Action.MISSING, Action.DOC
_PL, _CB, _LG, _UT, _FB = ("lightning.pytorch", "lightning.pytorch.callbacks", "lightning.pytorch.loggers",
                           "lightning.pytorch.utilities", "lightning.fabric")
_NOT_YET = "not in xtrain yet (the Trainer takes xtrain callbacks only); write a Callback"
# Lightning's TrainerFn members and the strings xtrain's trainer.state holds (the members' own values)
TRAINER_FN = {"FITTING": "fit", "VALIDATING": "validate", "TESTING": "test", "PREDICTING": "predict"}
_SLURM = ("under SLURM, xtrain saves last.ckpt, stops and runs scontrol requeue on SIGUSR1 during fit (sbatch "
          "--signal=USR1@N), and saves and stops without a requeue on SIGTERM")

RULES: tuple[Rule, ...] = (
    # -- modules: where names not listed below are looked up (same name in the xtrain module) -------------------
    _r(M, _PL, "xtrain.core"),
    _r(M, f"{_PL}.core", "xtrain.core"),
    _r(M, f"{_PL}.trainer", "xtrain.core"),
    _r(M, _CB, "xtrain.core.callbacks"),
    _r(M, _LG, "xtrain.core.loggers"),
    _r(M, f"{_PL}.cli", "xtrain.core.cli"),
    _r(M, f"{_PL}.strategies", "xtrain.strategies"),
    _r(M, f"{_PL}.plugins.environments", "xtrain.strategies.environments"),
    _r(M, f"{_PL}.accelerators", "xtrain.core", "third-party accelerators register an entry point instead"),
    _r(M, _UT, None, "xtrain has no utilities module; the names it has are in the names table"),
    _r(M, f"{_UT}.rank_zero", "xtrain.core.rank_zero"),
    _r(M, f"{_FB}.utilities.rank_zero", "xtrain.core.rank_zero"),
    _r(M, _FB, "xtrain.core"),
    _r(M, f"{_FB}.strategies", "xtrain.strategies"),
    _r(M, f"{_FB}.plugins.environments", "xtrain.strategies.environments"),
    _r(M, f"{_PL}.demos", "xtrain.core.demos", "BoringModel, RandomDataset and BoringDataModule are the same "
                                               "code; the other demos differ (see the names table)"),
    *(_r(M, f"{_PL}.demos.{sub}", "xtrain.core.demos") for sub in (
        "transformer", "mnist_datamodule", "boring_classes")),
    _r(M, f"{_PL}.tuner", "xtrain.core.tuner", "Tuner(trainer).lr_find(...) and .scale_batch_size(...)"),
    _r(M, f"{_PL}.profilers", "xtrain.core.profilers", "Trainer(profiler=\"simple\"|\"advanced\"|\"pytorch\") too"),
    _r(M, f"{_PL}.serve", None, "model serving is not part of xtrain"),
    _r(M, f"{_PL}.metrics", None, "Lightning 1.x: import it from torchmetrics (pip install torchmetrics); since "
                                  "torchmetrics 0.11 classification metrics need task=\"binary\"|\"multiclass\"|"
                                  "\"multilabel\""),
    # -- names ----------------------------------------------------------------------------------------------------
    _r(N, f"{_PL}.LightningModule", "xtrain.core.TrainModule", "same step methods, hooks, self.log and "
                                                               "configure_optimizers forms"),
    _r(N, f"{_PL}.LightningDataModule", "xtrain.core.DataModule"),
    _r(N, f"{_PL}.Trainer", "xtrain.core.Trainer", "arguments: see the Trainer arguments table"),
    _r(N, f"{_PL}.Callback", "xtrain.core.Callback", "same hook names and signatures"),
    _r(N, f"{_PL}.seed_everything", "xtrain.core.seed_everything"),
    *(_r(N, f"{_PL}.demos.{name}", None, note + ": copy Lightning's definition into your project, or keep "
                                               "importing it from lightning.pytorch.demos") for name, note in (
        ("Transformer", "xtrain.core.demos.Transformer is another network (decoder-only, other state_dict keys), so "
                        "seeded runs give other losses and Lightning checkpoints do not load"),
        ("WikiText2", "xtrain.core.demos.WikiText2 has the same word ids but one block more (Lightning's length is "
                      "len(data) // block_size - 1), so a seeded shuffle differs"),
        ("MNIST", "Lightning's MNIST is torchvision.datasets.MNIST when torchvision is installed; "
                  "xtrain.core.demos.MNIST gives [0, 1] tensors without a transform (or use torchvision's)"),
        ("MNISTDataModule", "xtrain.core.demos.MNISTDataModule has other loaders (num_workers=0, no pin_memory, the "
                            "last validation batch kept) and another normalization"))),
    *(_r(N, f"{_PL}.trainer.states.{name}", None, note) for name, note in (
        ("TrainerFn", "trainer.state is the plain string: TrainerFn." + ", ".join(
            f"{m}{' is' * (m == 'FITTING')} \"{v}\"" for m, v in TRAINER_FN.items()) + " (TrainerFn.X is "
                      "rewritten to its string; the import goes when nothing else uses it)"),
        ("RunningStage", "use trainer.training, trainer.validating, trainer.testing, trainer.predicting or "
                         "trainer.sanity_checking (True during that stage)"),
        ("TrainerStatus", "xtrain keeps no run status: trainer.state is None before the first run, a run that returns "
                          "has finished, an interrupted or failed run raises out of trainer.fit"),
        ("TrainerState", "trainer.state is the plain string \"fit\", \"validate\", \"test\" or \"predict\""))),
    _r(N, f"{_PL}.cli_lightning_logo", None, "prints Lightning's logo; the call is removed", action=DROP),
    _r(N, f"{_PL}.cli.LightningCLI", "xtrain.core.cli.XtrainCLI", "same layout of the YAML config; or run the "
                                                                 "`xtrain fit --config ...` command"),
    _r(N, f"{_PL}.cli.SaveConfigCallback", "xtrain.core.cli.SaveConfigCallback", "the same options and "
                                                                               "save_config hook"),
    _r(N, f"{_UT}.cli.LightningCLI", "xtrain.core.cli.XtrainCLI", "Lightning 1.x location of LightningCLI"),
    _r(N, f"{_PL}.cli.ReduceLROnPlateau", "xtrain.core.cli.ReduceLROnPlateau", "ReduceLROnPlateau with monitor, "
                                                                              "for a config's lr_scheduler"),
    _r(N, f"{_PL}.cli.LightningArgumentParser", None, "use jsonargparse.ArgumentParser"),
    _r(N, f"{_PL}.cli.OptimizerCallable", "xtrain.core.cli.OptimizerCallable", "the same type: a config's "
                                                                             "optimizer class, called with the params"),
    _r(N, f"{_PL}.cli.LRSchedulerCallable", "xtrain.core.cli.LRSchedulerCallable", "the same type, called with "
                                                                                 "the optimizer"),
    _r(N, f"{_PL}.core.mixins.HyperparametersMixin", None, "TrainModule and DataModule have save_hyperparameters"),
    _r(N, f"{_CB}.TQDMProgressBar", "xtrain.core.callbacks.ProgressBar", "refresh_rate (batches) becomes "
                                                                       "refresh_interval (seconds)"),
    _r(N, f"{_CB}.RichModelSummary", "xtrain.core.callbacks.ModelSummary"),
    _r(N, f"{_CB}.Checkpoint", "xtrain.core.callbacks.ModelCheckpoint", "the base class of checkpointing callbacks"),
    *(_r(N, f"{_CB}.{name}", f"xtrain.core.callbacks.{name}") for name in (
        "BackboneFinetuning", "BaseFinetuning", "BasePredictionWriter", "DeviceStatsMonitor", "EMAWeightAveraging",
        "GradientAccumulationScheduler", "LambdaCallback", "OnExceptionCheckpoint", "SpikeDetection",
        "StochasticWeightAveraging", "ThroughputMonitor", "Timer", "WeightAveraging")),
    _r(N, f"{_CB}.BatchSizeFinder", None, "use xtrain.core.tuner.Tuner(trainer).scale_batch_size(model) before fit"),
    _r(N, f"{_CB}.LearningRateFinder", None, "use xtrain.core.tuner.Tuner(trainer).lr_find(model) before fit"),
    _r(N, f"{_CB}.ModelPruning", None, _NOT_YET + " whose on_train_epoch_end calls torch.nn.utils.prune (e.g. "
                                                 "prune.l1_unstructured(module.fc, 'weight', amount=0.2))"),
    _r(N, f"{_LG}.LightningLoggerBase", "xtrain.core.loggers.Logger", "Lightning 1.x name of the base class"),
    _r(N, f"{_LG}.Logger", "xtrain.core.loggers.Logger"),
    *(_r(N, f"{_LG}.{name}", f"xtrain.core.loggers.{name}", "pip install \"xtrain-core[" + extra + "]\"")
      for name, extra in (("WandbLogger", "wandb"), ("MLFlowLogger", "mlflow"))),
    *(_r(N, f"{_LG}.{name}", None, "not in xtrain (see the loggers guide); use WandbLogger, MLFlowLogger, "
                                   "TensorBoardLogger or CSVLogger") for name in (
        "CometLogger", "NeptuneLogger", "LitLogger")),
    *(_r(N, f"{_UT}.{name}", f"xtrain.core.rank_zero.{name}") for name in (
        "rank_zero_only", "rank_zero_info", "rank_zero_warn", "rank_zero_debug")),
    _r(N, f"{_UT}.rank_zero_deprecation", "xtrain.core.rank_zero.rank_zero_warn", "warns a UserWarning"),
    _r(N, f"{_UT}.seed.seed_everything", "xtrain.core.seed_everything"),
    _r(N, f"{_UT}.grad_norm", None, "compute torch.linalg.vector_norm over p.grad yourself"),
    _r(N, f"{_UT}.AttributeDict", None, "self.hparams is a plain mapping with attribute access"),
    *(_r(N, f"{name}.CombinedLoader", "xtrain.core.combined_loader.CombinedLoader",
         "the same modes; a plain list or dict of training loaders is combined max_size_cycle, as in Lightning")
      for name in (_UT, f"{_UT}.combined_loader", f"{_PL}.trainer.supporters")),
    _r(N, f"{_UT}.model_helpers.get_torchvision_model", "torchvision.models.get_model", "the same call"),
    _r(N, f"{_UT}.model_helpers.is_overridden", None, "compare type(obj).method with the base class's"),
    _r(N, f"{_UT}.imports._TORCHVISION_AVAILABLE", None, "becomes importlib.util.find_spec(\"torchvision\") is "
                                                         "not None (any _<PACKAGE>_AVAILABLE the same way)",
       action=TR),
    *(_r(N, f"{_UT}.types.{name}", "typing.Any", "a type alias; Any keeps annotations valid") for name in (
        "STEP_OUTPUT", "EVAL_DATALOADERS", "TRAIN_DATALOADERS", "OptimizerLRScheduler", "LRSchedulerConfig",
        "OptimizerLRSchedulerConfig", "LRSchedulerTypeUnion")),
    _r(N, f"{_UT}.exceptions.MisconfigurationException", "xtrain.core.ConfigError", "a ValueError subclass"),
    _r(N, f"{_UT}.exceptions.SIGTERMException", "xtrain.core.SIGTERMException",
       "raised by fit after the preemption checkpoint"),
    _r(N, f"{_UT}.warnings.PossibleUserWarning", "builtins.UserWarning"),
    _r(N, f"{_PL}.strategies.DDPStrategy", "xtrain.strategies.DDPStrategy"),
    _r(N, f"{_PL}.strategies.FSDPStrategy", "xtrain.strategies.FSDPStrategy", "built on FSDP2"),
    _r(N, f"{_PL}.strategies.ParallelStrategy", "xtrain.core.ParallelStrategy"),
    _r(N, f"{_PL}.strategies.SingleDeviceStrategy", "xtrain.core.defaults.single_device.SingleDeviceStrategy"),
    _r(N, f"{_PL}.strategies.DeepSpeedStrategy", None, "DeepSpeed is not supported; use strategy=\"fsdp\""),
    *(_r(N, f"{_PL}.plugins.{name}", None, f"Lightning 1.x: pass strategy={strategy}(...) from xtrain.strategies "
                                           "instead of plugins=") for name, strategy in (
        ("DDPPlugin", "DDPStrategy"), ("DDPSpawnPlugin", "DDPStrategy"), ("DDPFullyShardedPlugin", "FSDPStrategy"))),
    _r(N, f"{_PL}.plugins.precision.MixedPrecision", None, "pass precision=\"16-mixed\" or \"bf16-mixed\""),
    _r(N, f"{_FB}.Fabric", "xtrain.core.Engine", "see the Fabric to Engine table"),
    _r(N, f"{_FB}.seed_everything", "xtrain.core.seed_everything"),
    _r(N, f"{_FB}.loggers.TensorBoardLogger", None, "the Engine has no loggers: use "
                                                    "torch.utils.tensorboard.SummaryWriter on rank 0"),
    _r(N, f"{_FB}.loggers.CSVLogger", None, "the Engine has no loggers: write the CSV on rank 0"),
    *(_r(N, f"{_FB}.utilities.{name}", f"xtrain.core.rank_zero.{name}") for name in (
        "rank_zero_only", "rank_zero_info", "rank_zero_warn")),
    _r(N, f"{_FB}.utilities.seed.seed_everything", "xtrain.core.seed_everything"),
    _r(N, f"{_FB}.wrappers.is_wrapped", None, "check isinstance(obj, xtrain.core._internal.engine_module"
                                              ".EngineModule)"),
    _r(N, f"{_FB}.wrappers._unwrap_objects", None, "use the wrapped model's .module"),
    # -- Trainer arguments ------------------------------------------------------------------------------------------
    *(_r(T, arg, action=SAME) for arg in (
        "strategy", "devices", "num_nodes", "logger", "callbacks", "fast_dev_run", "max_epochs",
        "min_epochs", "max_steps", "min_steps", "max_time", "limit_train_batches", "limit_val_batches",
        "limit_test_batches", "limit_predict_batches", "overfit_batches", "val_check_interval",
        "check_val_every_n_epoch", "num_sanity_val_steps", "log_every_n_steps", "enable_checkpointing",
        "enable_progress_bar", "enable_model_summary", "accumulate_grad_batches", "gradient_clip_val",
        "gradient_clip_algorithm", "deterministic", "benchmark", "inference_mode", "use_distributed_sampler",
        "profiler", "detect_anomaly", "barebones", "plugins", "sync_batchnorm", "reload_dataloaders_every_n_epochs",
        "default_root_dir")),
    _r(T, "accelerator", None, "kept; a Lightning 1.x strategy name given here (\"ddp\", \"ddp_spawn\", \"dp\", "
                               "\"ddp_cpu\") moves to strategy=", action=TR),
    _r(T, "precision", None, "legacy values become the canonical names (see the precision table)", action=TR),
    _r(T, "gpus", None, "Lightning 1.x: becomes accelerator=\"gpu\", devices=N; 0 or None (CPU in Lightning "
                        "1.x) becomes accelerator=\"cpu\"", action=TR),
    _r(T, "tpu_cores", None, "Lightning 1.x: becomes accelerator=\"tpu\", devices=N; 0 or None becomes "
                             "accelerator=\"cpu\"", action=TR),
    _r(T, "ipus", None, "IPUs are not supported"),
    _r(T, "hpus", None, "HPUs are not supported by the installed accelerators; see the plugin catalogue"),
    _r(T, "num_processes", None, "Lightning 1.x: becomes accelerator=\"cpu\", devices=N", action=TR),
    _r(T, "distributed_backend", "strategy", "Lightning 1.x"),
    _r(T, "replace_sampler_ddp", "use_distributed_sampler"),
    _r(T, "checkpoint_callback", "enable_checkpointing", "Lightning 1.x"),
    _r(T, "weights_summary", None, "Lightning 1.x: None becomes enable_model_summary=False; otherwise removed",
       action=TR),
    _r(T, "progress_bar_refresh_rate", None, "Lightning 1.x: 0 becomes enable_progress_bar=False; otherwise "
                                             "removed (the bar refreshes by time: callbacks=[ProgressBar("
                                             "refresh_interval=seconds)])", action=TR),
    _r(T, "resume_from_checkpoint", None, "Lightning 1.x: becomes ckpt_path= of trainer.fit (flagged when the fit "
                                          "call is not clear; a top-level ckpt_path: key in a CLI config)", action=TR),
    _r(T, "auto_select_gpus", None, "xtrain does not look for idle GPUs: devices=N takes the first N; pass indices "
                                    "(devices=[2, 3]) to choose", action=DROP),
    _r(T, "flush_logs_every_n_steps", None, "loggers flush on their own", action=DROP),
    _r(T, "move_metrics_to_cpu", None, "logged values stay on device until written", action=DROP),
    _r(T, "amp_backend", None, "precision=\"16-mixed\" uses torch.amp", action=DROP),
    _r(T, "amp_level", None, "apex is not supported", action=DROP),
    _r(T, "track_grad_norm", None, "log the gradient norm in on_before_optimizer_step"),
    _r(T, "terminate_on_nan", None, "use EarlyStopping(check_finite=True) or detect_anomaly=True"),
    _r(T, "stochastic_weight_avg", None, "use a StochasticWeightAveraging callback"),
    _r(T, "auto_lr_find", None, "Lightning 1.x: call xtrain.core.tuner.Tuner(trainer).lr_find(model) before fit"),
    _r(T, "auto_scale_batch_size", None, "Lightning 1.x: call Tuner(trainer).scale_batch_size(model) before fit"),
    _r(T, "truncated_bptt_steps", None, "split the sequence in training_step (manual optimization)"),
    _r(T, "multiple_trainloader_mode", None, "a list or dict of training loaders is cycled to the longest; for "
                                              "another mode pass CombinedLoader(loaders, mode)"),
    _r(T, "prepare_data_per_node", None, "set DataModule.prepare_data_per_node instead"),
    _r(T, "reload_dataloaders_every_epoch", "reload_dataloaders_every_n_epochs", "Lightning 1.x: True means 1"),
    _r(T, "log_gpu_memory", None, "use a DeviceStatsMonitor callback"),
    _r(T, "enable_autolog_hparams", None, "hyperparameters are always logged", action=DROP),
    _r(T, "model_registry", None, "not supported; delete the argument"),
    _r(T, "suggest_integrations", None, "xtrain prints no suggestions", action=DROP),
    # -- other arguments -------------------------------------------------------------------------------------------
    _r(AR, "TQDMProgressBar(refresh_rate=)", None, "the bar refreshes by time (refresh_interval, seconds)",
       action=DROP),
    _r(AR, "TQDMProgressBar(process_position=)", None, "one bar per process is not needed", action=DROP),
    _r(AR, "RichProgressBar(refresh_rate=)", None, "the bar refreshes by time (refresh_interval, seconds)",
       action=DROP),
    _r(AR, "RichProgressBar(leave=)", None, "the finished bar stays", action=DROP),
    _r(AR, "LightningCLI(save_config_kwargs=)", "save_config_kwargs", "config_filename, overwrite, multifile, "
                                                                     "save_to_log_dir", action=SAME),
    _r(AR, "LightningCLI(save_config_callback=)", "save_config_callback", "None saves no config; a subclass of "
                                                                         "SaveConfigCallback overrides save_config",
       action=SAME),
    _r(AR, "LightningCLI(save_config_overwrite=)", None, "Lightning 1.x: pass save_config_kwargs={\"overwrite\": "
                                                         "True}"),
    _r(AR, "LightningCLI(save_config_filename=)", None, "Lightning 1.x: pass save_config_kwargs={\"config_filename\":"
                                                        " ...}"),
    _r(AR, "LightningCLI(auto_configure_optimizers=)", None, "--optimizer/--lr_scheduler are always available; "
                                                            "remove the argument"),
    _r(AR, "LightningCLI(env_parse=)", None, "pass parser_kwargs={\"default_env\": True}"),
    *(_r(AR, f"ModelCheckpoint({key}=)", "every_n_epochs", "Lightning 1.x") for key in (
        "period", "every_n_val_epochs")),
    _r(AR, "trainer.fit(train_dataloader=)", "train_dataloaders", "Lightning 1.x"),
    _r(AR, "trainer.validate(val_dataloaders=)", "dataloaders", "Lightning 1.x"),
    _r(AR, "trainer.test(test_dataloaders=)", "dataloaders", "Lightning 1.x"),
    _r(AR, "trainer.predict(return_predictions=)", "return_predictions", "False keeps none in memory and returns "
                                                                         "None", action=SAME),
    _r(AR, "SLURMEnvironment(auto_requeue=)", None, f"removed when True (the default): {_SLURM}; flagged "
                                                     "otherwise: xtrain has no switch to turn the requeue off (leave "
                                                     "--signal=USR1@N out of the sbatch options instead)", action=TR),
    _r(AR, "SLURMEnvironment(requeue_signal=)", None, f"removed when None or SIGUSR1 (the default): {_SLURM}; "
                                                       "flagged otherwise: the signal cannot be changed (send "
                                                       "SIGUSR1: sbatch --signal=USR1@N)", action=TR),
    _r(AR, "ModelCheckpoint(save_on_exception=)", None, "removed when False (the default): xtrain's ModelCheckpoint "
                                                         "saves no extra file on an exception; flagged otherwise: add "
                                                         "xtrain.core.callbacks.OnExceptionCheckpoint instead",
       action=TR),
    _r(AR, "ModelSummary(max_depth=)", "max_depth", action=SAME),
    _r(AR, "RichModelSummary(max_depth=)", "max_depth", action=SAME),
    # -- Fabric to Engine ------------------------------------------------------------------------------------------
    *(_r(E, f"Fabric.{name}", f"Engine.{name}", action=SAME) for name in (
        "launch", "setup", "setup_module", "setup_optimizers", "setup_dataloaders", "backward", "clip_gradients",
        "autocast", "no_backward_sync", "to_device", "all_reduce", "all_gather", "broadcast", "barrier", "print",
        "seed_everything", "save", "load", "device", "global_rank", "local_rank", "node_rank", "world_size",
        "is_global_zero", "strategy", "rank_zero_first")),
    _r(E, "Fabric(callbacks=)", None, "the Engine has no callbacks: call your functions directly"),
    _r(E, "Fabric(loggers=)", None, "the Engine has no loggers: use torch.utils.tensorboard.SummaryWriter on rank 0"),
    _r(E, "Fabric.log", None, "the Engine has no loggers: write metrics with SummaryWriter on rank 0"),
    _r(E, "Fabric.log_dict", None, "the Engine has no loggers: write metrics with SummaryWriter on rank 0"),
    _r(E, "Fabric.loggers", None, "the Engine has no loggers"),
    _r(E, "Fabric.logger", None, "the Engine has no loggers"),
    _r(E, "Fabric.call", None, "call the hook on your objects directly"),
    _r(E, "Fabric.init_module", None, "build the module normally; Engine.setup moves and converts it"),
    _r(E, "Fabric.init_tensor", None, "create tensors on engine.device"),
    _r(E, "Fabric.load_raw", None, "use engine.load(path, {\"model\": model})"),
    _r(E, "Fabric.accelerator", None, "use engine.strategy.accelerator"),
    _r(E, "Fabric.run", None, "Lightning 1.x LightningLite: call your function after engine.launch()"),
    # Fabric method arguments that the Engine's methods lack (``fabric_args.py``): "removed when X" rows remove the
    # argument when its value is X (written literally) and flag it, with the text after "flagged: ", otherwise.
    _r(E, "Fabric.<method>(positional)", "keywords", "an argument that Fabric takes by position and the Engine by "
                                                   "keyword only, or not at all, becomes a keyword (clip_val and "
                                                   "max_norm of clip_gradients, strict of load, local of "
                                                   "rank_zero_first, reduce_op of all_reduce) and follows these rows",
       action=TR),
    *(_r(E, f"Fabric.{method}(move_to_device=)", None, f"removed when True (the default); flagged: Engine.{method} "
                                                      "always moves the module to engine.device; remove the argument "
                                                      "(move the module back after setup if it must stay off it)",
         action=TR) for method in ("setup", "setup_module")),
    _r(E, "Fabric.setup(scheduler=)", None, "removed when None; flagged: Engine.setup takes no scheduler (Fabric hands "
                                            "it to DeepSpeed and returns it last); remove it and its name from the "
                                            "assignment: the scheduler needs no setup", action=TR),
    *(_r(E, f"Fabric.{method}(_reapply_compile=)", None, "a private Fabric argument; the Engine does not re-apply "
                                                        "torch.compile: remove it (compile the module that setup "
                                                        "returns if you need to)") for method in (
        "setup", "setup_module")),
    _r(E, "Fabric.backward(tensor=)", "loss"),
    _r(E, "Fabric.backward(model=)", None, "Fabric reads it only to choose the DeepSpeed engine, which xtrain does "
                                           "not have", action=DROP),
    _r(E, "Fabric.backward(*args, **kwargs)", None, "Engine.backward(loss) passes nothing on to loss.backward: remove "
                                                    "them (retain_graph, create_graph and inputs cannot be given)"),
    _r(E, "Fabric.clip_gradients(norm_type=)", None, "removed when 2 (the default: the Engine clips the 2-norm), and "
                                                     "with clip_val= alone (Fabric ignores it then); flagged: the "
                                                     "Engine clips only the 2-norm; remove it, or call "
                                                     "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, "
                                                     "norm_type) yourself (with 16-bit mixed precision the gradients "
                                                     "are still scaled there)", action=TR),
    _r(E, "Fabric.clip_gradients(error_if_nonfinite=)", None, "removed when False; flagged: the Engine does not raise "
                                                              "on a non-finite norm (Fabric's default did); remove it "
                                                              "and check torch.isfinite on the norm that "
                                                              "clip_gradients returns", action=TR),
    *(_r(E, f"Fabric.{method}(data=)", "tensor") for method in ("all_gather", "all_reduce")),
    *(_r(E, f"Fabric.{method}(group=)", None, "removed when None (the default); flagged: the Engine's collectives "
                                              "run over all ranks; remove it, or call torch.distributed with the "
                                              "group", action=TR) for method in ("all_gather", "all_reduce")),
    _r(E, "Fabric.all_gather(sync_grads=)", None, "removed when False (the default); flagged: Engine.all_gather "
                                                  "carries no gradient back; remove it and gather with "
                                                  "torch.distributed.nn.functional.all_gather to backpropagate "
                                                  "through it", action=TR),
    _r(E, "Fabric.save(filter=)", None, "removed when None; flagged: Engine.save has no filter and saves each "
                                        "module's whole state_dict; remove it and put the entries to keep in state "
                                        "yourself (a dict of tensors is saved as it is)", action=TR),
    _r(E, "Fabric.load(weights_only=)", None, "removed when None or True (Engine.load always unpickles with "
                                              "weights_only=True); flagged: Engine.load reads only tensors and plain "
                                              "values; remove it and save other objects as their state_dict",
       action=TR),
    _r(E, "Fabric.seed_everything(seed=)", None, "kept; flagged when missing: Engine.seed_everything needs the "
                                                 "seed; pass it (xtrain.core.seed_everything() reads XTRAIN_SEED)",
       action=TR),
    _r(E, "Fabric.seed_everything(workers=)", None, "removed when True (Engine.seed_everything seeds dataloader "
                                                    "workers); flagged: the Engine always seeds the workers; remove "
                                                    "it, or call xtrain.core.seed_everything(seed, workers=False)",
       action=TR),
    _r(E, "Fabric.seed_everything(verbose=)", None, "removed when False; flagged: Engine.seed_everything prints "
                                                    "nothing; remove it, or call "
                                                    "xtrain.core.seed_everything(seed, verbose=True)", action=TR),
    _r(E, "Fabric.launch(function=)", "fn"),
    # -- LightningModule methods and attributes ----------------------------------------------------------------
    *(_r(A, f"{stage}_epoch_end", None, "removed in Lightning 2.0: collect the step outputs in a list yourself and "
                                        f"use on_{hook}_epoch_end") for stage, hook in (
        ("training", "train"), ("validation", "validation"), ("test", "test"), ("predict", "predict"))),
    *(_r(A, name, None, "removed in Lightning 2.0: do this at the end of *_step") for name in (
        "validation_step_end", "test_step_end")),
    _r(A, "configure_sharded_model", None, "deprecated since Lightning 2.1: xtrain calls it, as Lightning does, with "
                                           "a deprecation warning; rename it configure_model (built on the right "
                                           "device and dtype)"),
    _r(A, "on_epoch_start", None, "removed in Lightning 2.0: use on_train_epoch_start"),
    _r(A, "on_epoch_end", None, "removed in Lightning 2.0: use on_train_epoch_end"),
    _r(A, "on_batch_start", None, "removed in Lightning 2.0: use on_train_batch_start"),
    _r(A, "on_batch_end", None, "removed in Lightning 2.0: use on_train_batch_end"),
    _r(A, "on_pretrain_routine_start", None, "removed in Lightning 2.0: use on_fit_start"),
    _r(A, "on_pretrain_routine_end", None, "removed in Lightning 2.0: use on_fit_start"),
    _r(A, "backward", None, "xtrain never calls an override of backward (the strategy runs loss.backward()): move "
                            "what it adds to on_before_backward / on_after_backward, or use manual optimization with "
                            "self.manual_backward"),
    _r(A, "on_validation_model_zero_grad", None, "xtrain never calls an override: it releases the gradients before "
                                                 "each validation itself, as Lightning's default does"),
    *(_r(A, name, action=SAME) for name in (
        "training_step", "validation_step", "test_step", "predict_step", "configure_optimizers",
        "configure_callbacks", "configure_model", "configure_gradient_clipping", "optimizer_step",
        "optimizer_zero_grad", "lr_scheduler_step", "transfer_batch_to_device", "on_before_batch_transfer",
        "on_after_batch_transfer", "on_validation_model_eval", "on_validation_model_train", "on_test_model_eval",
        "on_test_model_train", "on_predict_model_eval", "on_save_checkpoint", "on_load_checkpoint", "setup",
        "teardown", "prepare_data", "on_fit_start", "on_fit_end", "on_train_start", "on_train_end",
        "on_train_epoch_start", "on_train_epoch_end", "on_validation_epoch_start", "on_validation_epoch_end",
        "on_test_epoch_start", "on_test_epoch_end", "on_before_backward", "on_after_backward",
        "on_before_optimizer_step", "on_before_zero_grad", "log", "log_dict", "print", "save_hyperparameters",
        "hparams", "optimizers", "lr_schedulers", "manual_backward", "clip_gradients", "toggle_optimizer",
        "untoggle_optimizer", "all_gather", "freeze", "unfreeze", "current_epoch", "global_step", "global_rank",
        "local_rank", "device", "dtype", "logger", "loggers", "trainer", "automatic_optimization",
        "example_input_array", "load_from_checkpoint", "to_onnx", "to_torchscript", "prepare_data_per_node")),
    # -- Trainer attributes ------------------------------------------------------------------------------------
    _r(TA, "lightning_module", "module"),
    _r(TA, "strategy.lightning_module", "strategy.module"),
    _r(TA, "add_argparse_args", None, "Lightning 1.x: add the arguments yourself or use XtrainCLI"),
    _r(TA, "from_argparse_args", None, "Lightning 1.x: pass Trainer(**vars(args)) or use XtrainCLI"),
    _r(TA, "tune", None, "Lightning 1.x: use xtrain.core.tuner.Tuner(trainer).lr_find / .scale_batch_size"),
    *(_r(TA, name, None, "Lightning's loop internals are not public in xtrain: for the number of optimizer steps "
                         "use trainer.estimated_stepping_batches, for the batches trainer.num_training_batches")
      for name in ("validate_loop", "test_loop", "predict_loop")),
    _r(TA, "accelerator", None, "use trainer.strategy.accelerator"),
    _r(TA, "progress_bar_dict", "progress_bar_metrics", "Lightning 1.x; without Lightning's loss and v_num entries"),
    _r(TA, "num_gpus", None, "Lightning 1.x: use trainer.world_size"),
    _r(TA, "state.fn", "state", "trainer.state is the plain string \"fit\", \"validate\", \"test\" or "
                                "\"predict\" (TrainerFn's values; None before the first run)", action=TR),
    _r(TA, "state.stage", None, "xtrain has no running stage: use trainer.training, trainer.validating, trainer.evaluating, "
                                "trainer.testing, trainer.predicting or trainer.sanity_checking (True during that "
                                "stage; all False where Lightning's stage is None)"),
    _r(TA, "state.status", None, "xtrain keeps no run status: trainer.state is None before the first run "
                                 "(INITIALIZING); a run that returns has finished (FINISHED); an interrupted or failed "
                                 "run raises out of trainer.fit (catch KeyboardInterrupt for INTERRUPTED)"),
    _r(TA, "interrupted", None, "xtrain has no interrupted flag: a KeyboardInterrupt raises out of trainer.fit; "
                                "catch it around the call"),
    # -- precision values ----------------------------------------------------------------------------------------
    _r(P, "16", "16-mixed", action=TR),
    _r(P, "bf16", "bf16-mixed", action=TR),
    _r(P, "32", "32-true", action=TR),
    _r(P, "64", "64-true", action=TR),
    # -- behaviour -------------------------------------------------------------------------------------------------
    _r(B, "lightning_logs/", "xtrain_logs/", "the default log directory; paths a run writes to are rewritten, a "
       "checkpoint it loads keeps its path", action=TR),
    _r(B, "errors", None, "every invalid argument raises xtrain.core.ConfigError (a ValueError) before anything "
                          "starts; the message names the argument, the value, the choices and the fix", action=DOC),
    _r(B, "resume directory", None, "fit(ckpt_path=...) continues the checkpoint's run: loggers write into its "
                                    "version directory (Lightning starts version_N+1) and drop what was logged after "
                                    "the checkpoint, and ModelCheckpoint keeps ranking (and pruning) the files there "
                                    "that its filename template (or last) names, never the one the run started from "
                                    "and never another file the checkpoint names (it warns and keeps it). To leave "
                                    "the earlier run's files as they "
                                    "are, give the resumed run's logger a version of its own (CSVLogger(version=1))",
       action=DOC),
    _r(B, "checkpoints", None, "saved at safe points (after an optimizer step or a finished epoch) and resumed "
                               "exactly, mid-epoch included; loaded with weights_only=True, so hyperparameters "
                               "that are not plain values are left out with a warning when xtrain saves. A "
                               "Lightning checkpoint whose save_hyperparameters recorded objects (an Enum, an "
                               "argparse.Namespace among the arguments, an nn.Module, a functools.partial; "
                               "save_hyperparameters(namespace) itself loads) is refused unread: if you "
                               "trust it and the classes are yours, torch.serialization.add_safe_globals([TheClass]) "
                               "then loads it with its hyperparameters; or read it yourself (torch.load(path, "
                               "weights_only=False)) and load its \"state_dict\" into the model",
       action=DOC),
    _r(B, "Lightning checkpoints", None, "load_from_checkpoint reads their weights, hyperparameters (the module's "
                                         "strict_loading applies, as in Lightning) and the data module's state; "
                                         "validate/test/predict(ckpt_path=...) load their weights and the data "
                                         "module's state, as Lightning does; fit(ckpt_path=...) does not resume them "
                                         "(their optimizer and loop states are Lightning's) and says so: load the "
                                         "weights, then fit without ckpt_path, which restarts the optimizer, "
                                         "schedulers and step count; ckpt_path=\"auto\" skips them. A LightningCLI "
                                         "checkpoint's class_path/init_args arguments are not built from the file: "
                                         "pass the object (the message shows the call). Lightning's sharded folders "
                                         "(FSDP, DeepSpeed) are consolidated with Lightning's own tools first (the "
                                         "message names them)",
       action=DOC),
    _r(B, "back to Lightning", None, "an xtrain checkpoint does not load in Lightning (no "
                                     "pytorch-lightning_version; its loops are xtrain's): read it with "
                                     "torch.load(path, weights_only=True) and load ckpt[\"state_dict\"] into the "
                                     "LightningModule (the same keys) with load_state_dict; its hyperparameters are "
                                     "ckpt[\"hyper_parameters\"]", action=DOC),
    _r(B, "checkpoint file names", None, "a \"/\" in a ModelCheckpoint filename template (\"{val/loss:.2f}\") "
                                         "becomes \"_\" (val_loss=0.12.ckpt); Lightning writes a subfolder "
                                         "(val/loss=0.12.ckpt)", action=DOC),
    _r(B, "callback state keys", None, "a checkpoint's \"callbacks\" entries are keyed "
                                       "ModelCheckpoint[monitor=...,mode=...] (Lightning: "
                                       "ModelCheckpoint{'monitor': ..., 'mode': ...}), and xtrain's own callbacks "
                                       "(ModelSummary, LearningRateMonitor) have entries too; code reading "
                                       "ckpt[\"callbacks\"] by key should look the key up by its class name",
       action=DOC),
    _r(B, "schedulers in an epoch-end checkpoint", None, "the checkpoint written at an epoch's end holds the "
                                                         "schedulers after that epoch's step (ReduceLROnPlateau "
                                                         "included: last_epoch one higher than Lightning's file); "
                                                         "each framework resumes its own files exactly",
       action=DOC),
    _r(B, "StochasticWeightAveraging with BatchNorm", None, "the module fit returns has the statistics recomputed "
                                                            "for the averaged weights, as Lightning's; the "
                                                            "checkpoints written during fit hold the training weights "
                                                            "(as Lightning's) and no checkpoint holds the average "
                                                            "with recomputed statistics (Lightning saves the extra "
                                                            "epoch that recomputes them). Save the final module with "
                                                            "trainer.save_checkpoint(\"final.ckpt\") after fit",
       action=DOC),
    _r(B, "ddp validation and buffers", None, "validation inside fit uses rank 0's buffers (BatchNorm statistics) "
                                              "on every rank, as Lightning's does through the DDP wrapper; "
                                              "DDPStrategy(broadcast_buffers=False) keeps each rank's own",
       action=DOC),
    _r(B, "default checkpointing", None, "also writes last.ckpt, so ckpt_path=\"last\" works after a crash",
       action=DOC),
    _r(B, "callback order", None, "callbacks, then the module's hook, then checkpointing and early stopping (so "
                                  "they see what the module logged)", action=DOC),
    _r(B, "plugins", None, "accelerators, strategies and precisions are found by entry point; there is no "
                           "StrategyRegistry.register", action=DOC),
    _r(B, "devices strings", None, "a string is always device indices: devices=\"2,\" or [2] is device 2; a bare "
                                   "\"2\" is refused with the two spellings to choose from", action=DOC),
    _r(B, "second fit after spawn", None, "trainer.fit can be called again after strategy=\"ddp_spawn\"; rank 0's "
                                          "state comes back to the caller", action=DOC),
    _r(B, "strategies", None, "\"dp\", \"horovod\" and \"bagua\" are available again (install xtrain-strategies); "
                              "\"fsdp\" is built on FSDP2 and its checkpoints load under any strategy and world size",
       action=DOC),
    _r(B, "logged step", None, "loggers receive the step after it is taken (the first batch logs at step 1, with "
                               "log_every_n_steps=50 at 50); Lightning writes the count before it (0, 49). Under "
                               "manual optimization both count batches, not optimizer steps", action=DOC),
    _r(B, "Engine.all_gather in one process", None, "stacks along a new first dimension as with several processes "
                                                    "(shape (1, ...)); Fabric returns the tensor unchanged. Numbers "
                                                    "and nested collections are gathered as in Fabric", action=DOC),
    _r(B, "distributed training order", None, "under ddp/fsdp a training loader with shuffle=False is split "
                                              "across ranks in order, so the run matches one process; Lightning's "
                                              "distributed sampler shuffles training data whatever the loader says. "
                                              "Pass shuffle=True for a shuffled order", action=DOC),
    _r(B, "last.ckpt", None, "written at every save point (each epoch by default), so ckpt_path=\"last\" resumes "
                             "the latest state; Lightning 2.6's save_last=True copies it only when a top-k file is "
                             "saved", action=DOC),
    _r(B, "current_epoch after a stop inside an epoch", None, "counts finished epochs: a run that max_steps, "
                                                              "max_time or should_stop ends inside its 4th epoch "
                                                              "reports 3 (Lightning 4), and a resume finishes that "
                                                              "epoch", action=DOC),
    _r(B, "precision legacy values", None, "16, \"16\" and \"bf16\" still work with a warning naming the "
                                           "canonical value; migrate writes the canonical value", action=DOC),
    _r(B, "16-mixed on the CPU", None, "runs float16 autocast with a gradient scaler, as on a GPU (a step the scaler "
                                       "skips still counts in global_step, as Lightning's does on a GPU); Lightning "
                                       "switches to bf16-mixed on the CPU with a warning. Pass precision="
                                       "\"bf16-mixed\" for Lightning's numbers there", action=DOC),
    _r(B, "random numbers in dataloader workers", None, "with num_workers > 0, training batches are loaded with "
                                                        "random, numpy and torch reseeded from the epoch, rank and "
                                                        "batch position (what makes a mid-epoch resume exact): the "
                                                        "samples and their order equal Lightning's, values drawn in "
                                                        "__getitem__ (augmentations) differ", action=DOC),
    _r(B, "Ctrl-C", None, "fit re-raises the KeyboardInterrupt after on_exception and teardown (Lightning prints "
                          "'attempting graceful shutdown' and raises SystemExit); teardown hooks also run after any "
                          "exception. There is no trainer.interrupted: catch KeyboardInterrupt", action=DOC),
    _r(B, "bare test() without a checkpoint", None, "test()/validate()/predict() without a model and without a "
                                                    "best checkpoint use the weights in memory; Lightning raises "
                                                    "'ModelCheckpoint is not configured'", action=DOC),
    _r(B, "val_check_interval fraction without check_val_every_n_epoch", None, "a float with "
                                                                           "check_val_every_n_epoch=None validates "
                                                                           "at that fraction of each epoch's "
                                                                           "batches; Lightning refuses it",
       action=DOC),
    _r(B, "on_save_checkpoint", None, "called once per save point, also when ModelCheckpoint writes a top-k file "
                                      "and last.ckpt (a hard link of it); Lightning calls it once per file", action=DOC),
    _r(B, "DataModule state in a checkpoint", None, "a DataModule's state_dict() is saved under the key "
                                                    "'datamodule'; Lightning's key is the class name "
                                                    "(checkpoint['MyDataModule']): code reading checkpoint files "
                                                    "directly reads checkpoint['datamodule']", action=DOC),
)
