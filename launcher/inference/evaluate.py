"""`mode=eval` and `mode=predict`: a trained run's model on a dataset split, logged to MLflow beside it.

    python -m launcher mode=eval eval.run=exp1                      val metrics of exp1's final model
    python -m launcher mode=eval eval.run=exp1 eval.model=best      ... of its best model
    python -m launcher mode=predict eval.run=exp1 eval.split=val    predictions.npz, also an MLflow artifact

Each writes in a dir of its own inside the run it reads, outputs/runs/exp1/<eval or predict>/<name or timestamp>/
(`launcher.launch.run_dirs`): its console.log, outcome.json and predictions; an `eval.output=` given on the command
line is a path from where the command runs.

The config is the training run's own (its resolved `<run dir>/config.yaml`, whatever search path composed it) with
this command's overrides on top, so the same data, task, precision and strategy are used unless changed here.
Evaluation runs the training engine's evaluation loop (every example, metrics summed over replicas) under
that strategy; prediction runs the exported model on this process. The MLflow run is a child of the
training run (`mlflow.parentRunId`), and the training run gets a tag pointing back to it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import yaml
from omegaconf import DictConfig, OmegaConf

from launcher.config.errors import ConfigError, Violation, raise_if_any
from launcher.config.models import CustomModelConfig
from launcher.config.schema import DATASET_SCHEMAS, MODEL_SCHEMAS, Config, CustomDatasetConfig
from launcher.files import CONFIG_FILE
from launcher.inference.batch_outputs import FORMATS, Writer
from launcher.launch.checkpoint_index import complete_steps
from launcher.launch.find_run import find_training_run
from launcher.launch.shell import run_in_shell
from launcher.outcome import EXIT_FINISHED, FINISHED, OutcomeRecord
from launcher.plan.environment import probe
from launcher.tracking.client import with_retry
from launcher.tracking.tracker import open_run
from launcher.tracking.uri import HIDDEN
from launcher.train import runtime
from launcher.train.preprocessing import pixel_scaling

# What decides which examples are held out: changed at evaluation, the test split is not the one never trained on.
SPLIT_KEYS = ("validation_split", "test_split", "shuffle_seed", "seed", "num_examples")


def evaluate(node, run_dir: Path, launch_dir: Path, overrides: list[str]) -> int:
    """mode=eval / mode=predict in the shell: find the training run, compose its config under this command's
    overrides, evaluate or predict; returns the exit code."""
    mode = node.mode.value

    def body() -> OutcomeRecord:
        train_dir = find_training_run(str(node.eval.run), launch_dir, str(node.tracking.uri))
        run_node = config_of_run(train_dir, node, overrides)
        if any(o.lstrip("+~").split("=", 1)[0] == "eval.output" for o in overrides):
            run_node.eval.output = str(new_output(launch_dir / Path(str(run_node.eval.output)).expanduser()))
        run_id, metrics = Evaluation(run_node, train_dir, run_dir, launch_dir, mode).execute()
        return OutcomeRecord(status=FINISHED, exit_code=EXIT_FINISHED, run_id=run_id, metrics=metrics, mode=mode)

    return run_in_shell(body, run_dir, mode, bool(node.get("tf_logs", False)))


def new_output(path: Path) -> Path:
    """eval.output given on the command line (a path from where the command runs): a file that is not there yet.
    Predictions never replace a person's file (their data, eval.input itself, an earlier prediction)."""
    if path.exists():
        raise ConfigError.single(
            "eval.output",
            str(path),
            "a file that does not exist yet (predictions are never written over a file that is there: your data, "
            "eval.input, earlier predictions)",
            f"eval.output={path.stem}_2{path.suffix}, or remove {path} first",
        )
    return path


def config_of_run(train_dir: Path, node, overrides: list[str]):
    """The training run's own resolved config (its config.yaml: whatever search path, `--config-dir` or plugin
    composed it), with this command's overrides on top, each value as this command's Hydra composed it (a group
    choice brings its whole section). A multi-worker run is evaluated in this one process."""
    saved = OmegaConf.load(train_dir / CONFIG_FILE)
    run_node = _typed_like(saved)
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides if "=" in o and not o.startswith("hydra.")}
    if saved.strategy.kind == "multi_worker" and not any(k.split(".")[0] == "strategy" for k in given):
        given.add("strategy")  # the workers' cluster is not there to join: this command's strategy
        print(
            "  strategy  default  the run trained with strategy=multi_worker; evaluation runs in this one process "
            "(strategy=mirrored to use its devices)",
            flush=True,
        )
    for key in ("tracking.uri", "checkpoint.directory"):  # written with its credentials hidden: this command's
        if HIDDEN in str(OmegaConf.select(saved, key, default="")):
            given.add(key)
    presets = [k for k in given if "." not in k and k not in run_node]  # debug=, experiment=: they set other sections
    if presets:
        chosen = next(o.split("=", 1)[1] for o in overrides if o.lstrip("+~").split("=", 1)[0] == presets[0])
        raise ConfigError.single(
            presets[0],
            chosen,
            "overrides of keys or sections the trained run has (a preset sets keys of its own choosing)",
            "name the keys it would set instead, e.g. train.max_validation_steps=1",
        )
    for key in sorted(given, key=lambda k: k.count(".")):
        value = OmegaConf.select(node, key, throw_on_missing=False)
        if "." in key:
            OmegaConf.update(run_node, key, value, merge=False, force_add=True)
        elif not (isinstance(value, DictConfig) and _option(value) == _option(run_node[key])):
            run_node[key] = value  # another option (its section as this command composed it), or a top-level value
        # else the run's own option named again: its trained values stay; this command's dotted keys apply
    return run_node


def _option(section) -> object:
    """Which option a section is: its `name` (model, dataset, precision...) or `kind` (strategy)."""
    return section.get("name", section.get("kind")) if isinstance(section, DictConfig) else None


def _typed_like(saved):
    """A config.yaml as the structured config it was written from: the schema of its model and dataset options
    (a plugin's or the person's own: the custom schema) under the Config schema."""
    schema = OmegaConf.structured(Config)
    schema.model = OmegaConf.structured(MODEL_SCHEMAS.get(str(saved.model.name), CustomModelConfig))
    schema.dataset = OmegaConf.structured(DATASET_SCHEMAS.get(str(saved.dataset.name), CustomDatasetConfig))
    node = OmegaConf.merge(schema, saved)
    OmegaConf.set_struct(node, True)
    return node


class Evaluation:
    """mode=eval / mode=predict of one trained run: its config, its model (final, best, a file or a checkpoint),
    a split evaluated by the engine's loop or predicted by the exported model, and the MLflow child run."""

    def __init__(self, node, train_dir: Path, run_dir: Path, launch_dir: Path, mode: str):
        from launcher.config.schema import to_config

        self.config = to_config(node)
        self.config.checkpoint.enabled = False  # the training run's checkpoints are read, never written
        self.train_dir, self.run_dir, self.launch_dir, self.mode = train_dir, run_dir, launch_dir, mode
        self.training = OutcomeRecord.read(train_dir)

    def execute(self) -> tuple[str | None, dict]:
        from launcher.launch.review import review

        config = self.config
        self.env = probe(measure=False)
        checked = review(config, self.env, lambda plan: runtime.configure(plan, config.seed, config.deterministic))
        self.plan, self.source, self.strategy, problems = (
            checked.plan,
            checked.source,
            checked.strategy,
            checked.problems,
        )
        self.model_path = self._model_path(problems)
        split = config.eval.split.value
        if config.eval.input:  # a file or folder instead of a split (batch_predict)
            from launcher.inference.batch_predict import problems as batch_problems

            problems.extend(batch_problems(config.eval, self.launch_dir, self.mode))
            split = "input"
        elif split == "test":
            problems.extend(self._test_split_problems())
        raise_if_any(problems)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / config.eval.output).parent.mkdir(parents=True, exist_ok=True)  # eval.output=results/p.csv
        if split == "input":
            print(f"{self.mode}: {self.model_path} on {config.eval.input}", flush=True)
        else:
            print(
                f"{self.mode}: {self.model_path} on the {split} split of {config.dataset.name} "
                f"({self.source.size(split)} examples)",
                flush=True,
            )
        if self.mode == "eval":
            metrics, files = self._evaluate(split), []
        else:
            metrics, files = self._predict(split)
        run_id = self._track(metrics, files, split)
        for key, value in metrics.items():
            print(f"  {key:<20} {value:.4f}")
        print(f"  {self.mode} run dir: {self.run_dir}", flush=True)
        return run_id, metrics

    def _model_path(self, problems: list) -> Path | None:
        found = trained_model(str(self.config.eval.model), self.train_dir, self.launch_dir)
        if isinstance(found, Violation):
            problems.append(found)
            return None
        return found

    def _test_split_problems(self) -> list[Violation]:
        """eval.split=test needs a test split, and the training run's one: the same data divided another way
        would put examples the model trained on into the test split."""
        if self.source is not None and self.source.test is None:
            return [
                _violation(
                    "eval.split",
                    "test",
                    f"a split dataset={self.config.dataset.name} has: train or val (it has no test split)",
                    "train with dataset.test_split=0.1 (or the dataset's own test data), then eval.split=test",
                )
            ]
        saved = self.train_dir / CONFIG_FILE
        trained = (yaml.safe_load(saved.read_text()) or {}).get("dataset", {}) if saved.is_file() else {}
        now = self.config.dataset
        if trained.get("name") != now.name:
            return []  # another dataset altogether: its test split is its own
        return [
            _violation(
                f"dataset.{key}",
                getattr(now, key),
                f"the training run's value ({trained[key]}): with another, the test split would hold examples "
                "the model trained on",
                f"drop the dataset.{key} override (the run trained with dataset.{key}={trained[key]})",
            )
            for key in SPLIT_KEYS
            if key in trained and getattr(now, key, trained[key]) != trained[key]
        ]

    def _load(self, in_scope: bool):
        """The model: a .keras export, or the training config's model with a checkpoint's weights; the data's
        pixels scaled on the side training scaled them (`pixel_scaling`)."""
        model = self._loaded(in_scope)
        pixel_scaling(model, self.source)
        return model

    def _loaded(self, in_scope: bool):
        import keras

        scope = self.strategy.scope() if in_scope else contextlib.nullcontext()
        with scope:
            if self.model_path.suffix == ".keras":
                return keras.saving.load_model(self.model_path, compile=False)
            import tensorflow as tf

            from launcher.train.build import build

            model = build(self.config, self.plan, self.source, self.strategy).model
            tf.train.Checkpoint(model=model).restore(str(self.model_path)).expect_partial()
            return model

    def _evaluate(self, split: str) -> dict[str, float]:
        import keras

        from launcher.train.build import Built
        from launcher.train.engine import Engine, EngineSettings

        model = self._load(in_scope=True)
        with self.strategy.scope():
            task = self._task(model)
            optimizer = keras.optimizers.SGD()
        built = Built(strategy=self.strategy, model=model, optimizer=optimizer, task=task)
        engine = Engine(built, self.plan, self.source, EngineSettings(seed=self.config.seed, verbose=0))
        return engine.evaluate(split=split)

    def _task(self, model):
        """The training run's task for `model`: under task.heads a task per output (the model answers a dict keyed
        by head)."""
        from launcher.train.build import model_heads
        from launcher.train.outputs import output_activations
        from launcher.train.tasks import make_task

        widths, activations = model_heads(model, self.source), output_activations(model)
        if not self.config.task.heads:
            one = {"": next(iter(widths.values()), 0)}, {"": next(iter(activations.values()), "")}
            return make_task(self.config.task, self.source, one[0], training=False, activations=one[1])
        heads = set(self.config.task.heads)
        # A model.keras saved before heads were keyed by name holds a list named after its float32 layers.
        named = {n if n in heads else n.removesuffix("_float32"): width for n, width in widths.items()}
        acts = {n if n in heads else n.removesuffix("_float32"): a for n, a in activations.items()}
        return make_task(self.config.task, self.source, named, training=False, activations=acts)

    def _predict(self, split: str) -> tuple[dict[str, float], list[Path]]:
        if split == "input":  # eval.input: streamed through the run's SavedModel, chunk by chunk
            from launcher.inference.batch_predict import predict_input

            def model_and_task():  # only when the SavedModel must be exported first
                model = self._load(in_scope=False)
                return model, self._task(model)

            return predict_input(
                self.config.eval, self.train_dir, self.run_dir, self.launch_dir, model_and_task, self.source
            )
        model = self._load(in_scope=False)  # on this process: no collective for every worker to join
        task = self._task(model)
        path = self.run_dir / str(self.config.eval.output)
        if path.suffix.lower() not in FORMATS:  # as np.savez names it
            path = path.with_name(f"{path.name}.npz")
        # Written as file predictions are (`batch_outputs.Writer`: under .partial, renamed when whole), a batch at a
        # time, each example numbered by its `row` in the split.
        writer = Writer(path, "row")
        try:
            for features, labels, *_ in self.source.pipeline(split, self.plan.batch.global_batch, False, None):
                answer = split_answer(task, model(features, training=False), labels)
                rows = len(next(iter(answer.values())))
                writer.write(pa.array(np.arange(writer.rows, writer.rows + rows, dtype=np.int64)), answer)
            writer.close()
        except BaseException:
            writer.abort()
            raise
        print(f"  predictions of {writer.rows} examples written to {path}", flush=True)
        return {f"{split}_examples": float(writer.rows)}, [path]

    def _track(self, metrics: dict, files: list[Path], split: str) -> str | None:
        tr = self.config.tracking
        if not tr.enabled:
            return None
        parent = self.training.run_id if self.training else None
        name = f"{self.mode}-{self.train_dir.name}-{self.config.eval.model}-{split}"
        tracker = open_run(tr.uri, self.launch_dir, tr.experiment, name, parent_run_id=parent, run_dir=self.run_dir)
        try:
            tracker.log_params(
                {
                    "mode": self.mode,
                    "eval.run": str(self.train_dir),
                    "eval.model": str(self.model_path),
                    "eval.split": split,
                    "task.name": self.plan.task.name,
                    "dataset.name": self.config.dataset.name,
                }
            )
            tracker.set_tags(
                {
                    "launcher.mode": self.mode,
                    "eval.training_run_id": parent or "",
                    "plan.strategy": self.plan.strategy.kind,
                    "plan.precision": self.plan.precision.name,
                    "plan.step": self.plan.step.kind,
                    "run_dir": str(self.run_dir),
                }
            )
            tracker.log_metrics(metrics, step=0)
            for path in files:
                tracker.log_artifact(path, "predictions")
            tracker.flush()
        finally:
            tracker.end("FINISHED")
        if parent:
            with_retry(tracker.client.set_tag, parent, f"{self.mode}.latest_run_id", tracker.run_id)
        print(f"  MLflow: run {tracker.run_id} (child of the training run {parent})", flush=True)
        return tracker.run_id


def _violation(key, value, expected, fix):
    return Violation(key, value, expected, fix)


def trained_model(wanted: str, train_dir: Path, launch_dir: Path) -> Path | Violation:
    """The model `eval.model` names in the training run `train_dir` (final, best, a .keras file or a ckpt-N prefix,
    a relative path from `launch_dir`), or why it cannot be used with a fix that names a model the run has."""
    named = {"final": train_dir / "model.keras", "best": train_dir / "best.keras"}
    path = named.get(wanted) or Path(wanted).expanduser()
    if not path.is_absolute() and wanted not in named:
        path = launch_dir / path
    if path.is_file() or Path(f"{path}.index").is_file():
        return path
    why = {
        "final": "the run exported none (checkpoint.export_model=false?)",
        "best": "the run kept none (it needs checkpoint.monitor)",
    }.get(wanted, "no such file or ckpt-N prefix")
    kept = [name for name, file in named.items() if file.is_file() and name != wanted]
    checkpoints = train_dir / "checkpoints"
    steps = complete_steps(checkpoints)
    if kept:
        fix = f"eval.model={kept[0]}"
    elif steps:
        fix = f"eval.model={checkpoints / f'ckpt-{steps[-1]}'} (its latest complete checkpoint)"
    else:
        fix = f"train the run first, or give a .keras file: no model in {train_dir}, no checkpoint in {checkpoints}"
    expected = f"final, best, a .keras file or a ckpt-N checkpoint prefix ({why}: {path})"
    return _violation("eval.model", wanted, expected, fix)


TARGET = "target"  # the split's label beside the answer (per head: <head>_target)


def split_answer(task, outputs, labels) -> dict[str, np.ndarray]:
    """What predict writes per example of a split: the task's served answer, what every artifact answers
    (`Task.served`: `probabilities`, `label`...; `<head>_<key>` per head), then the split's label as the data holds
    it, `target` (`<head>_target`)."""
    answer = {key: np.asarray(value) for key, value in task.served(outputs).items()}
    heads = getattr(task, "heads", None)
    if heads is None:
        return {**answer, TARGET: np.asarray(labels)}
    return {**answer, **{f"{head}_{TARGET}": np.asarray(labels[head]) for head in heads}}
