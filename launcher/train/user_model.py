"""`model=custom model.builder=pkg.mod:build` (or an installed plugin): the user's Keras model.

`check` imports the builder and checks its signature with the data loaded, before anything is built;
`build` calls it inside the strategy scope under the Plan's dtype policy (as the built-in builders are)
and refuses what the engine cannot train: not a keras.Model, an output that does not fit the task (several
outputs are matched against task.heads by `launcher.train.build.check_heads`).
"""

from __future__ import annotations

from launcher.config.errors import ConfigError, FailsUnderMixedPolicy
from launcher.config.imports import check_call, configured_path, import_component
from launcher.config.raised import told
from launcher.train.model_io import ModelSpec

SHOWN_SIGNATURE = "build(spec, **params) -> keras.Model (spec: input_shape, outputs, task, kind, vocab_size)"


ADAPTED_SIGNATURE = "build(spec, adapted, **params) -> keras.Model (adapted: what model.adapt returned, by name)"


def _builder(model_config, source, adapted: dict | None = None):
    """The builder, its signature checked against what it will be given: `adapted=` too when model.adapt is set."""
    key, path = configured_path("model", "builder", model_config)
    function = import_component(key, path, "a model builder function")
    given = dict(model_config.params) | ({"adapted": adapted or {}} if str(model_config.adapt).strip() else {})
    shown = ADAPTED_SIGNATURE if "adapted" in given else SHOWN_SIGNATURE
    check_call(key, path, function, (ModelSpec.of(source),), given, shown)
    return key, path, function, given


def check(model_config, source) -> None:
    _builder(model_config, source)


def build(model_config, source, adapted: dict | None = None):
    """The user's model, built by their builder; `adapted`: model.adapt's layers by name (launcher.train.adapt)."""
    import keras

    if adapted is None and str(model_config.adapt).strip():  # a caller that did not adapt first (the doctor)
        import tensorflow as tf

        from launcher.train.adapt import adapt_once

        adapted = adapt_once(model_config, source, tf.distribute.get_strategy(), None).layers
    key, path, function, given = _builder(model_config, source, adapted)
    spec = ModelSpec.of(source)
    try:
        model = function(spec, **given)
    except ConfigError:
        raise
    except Exception as err:
        fix = _policy_fix(function, spec, model_config)
        refusal = ConfigError.single(
            key,
            path,
            "a builder that runs (it raised the error below)",
            fix or "fix the builder where it raised (call it in Python on the same spec for the whole traceback)",
            detail=told(err, function),
        )
        if fix:
            raise FailsUnderMixedPolicy(refusal.violations, keras.mixed_precision.global_policy().name) from None
        raise refusal from None
    if not isinstance(model, keras.Model):
        raise ConfigError.single(
            key,
            path,
            f"a builder that returns a keras.Model (it returned {type(model).__name__})",
            "return keras.Model(inputs, outputs) from the builder",
        )
    called = None
    if not model.built or not model.outputs:
        try:
            called = model(keras.ops.zeros((1, *spec.input_shape), dtype=spec.input_dtype))
        except Exception as err:
            raise ConfigError.single(
                key,
                path,
                f"a model that accepts inputs of shape {spec.input_shape} (calling it raised the error below)",
                "build the model with keras.Input(shape=spec.input_shape)",
                detail=told(err, function),
            ) from None
    if len(_names(model, called)) == 1:  # several: each head's task is checked against it at build
        _check_output(model, spec, key, path)
    return model


def _policy_fix(function, spec: ModelSpec, model_config) -> str:
    """The fix for a builder that fails under a mixed policy and runs under float32 (what it adapts, a
    Normalization or FeatureSpace on a tf.data, cannot under mixed_bfloat16): "" when the policy is not the cause."""
    import keras

    policy = keras.mixed_precision.global_policy().name
    if not policy.startswith("mixed"):
        return ""
    keras.mixed_precision.set_global_policy("float32")
    try:
        function(spec, **dict(model_config.params))
    except Exception:
        return ""
    finally:
        keras.mixed_precision.set_global_policy(policy)
    return (
        f"precision=fp32: the builder runs under float32 and fails under {policy}; or keep the precision and "
        "give the layers it adapts dtype='float32' (keras.layers.Normalization(dtype='float32'))"
    )


def output_names(model) -> list[str]:
    """The names of a functional model's outputs, in the order of `model.outputs`: a dict's keys, else the names
    of the layers that make them."""
    if len(model.outputs) > 1 and isinstance(model.output, dict):
        import keras

        return ["/".join(str(part) for part in path) for path, _ in keras.tree.flatten_with_path(model.output)]
    return list(getattr(model, "output_names", None) or [t._keras_history[0].name for t in model.outputs])


def _names(model, called) -> list[str]:
    """The model's output names; a subclassed model's from what its call returned (a dict's keys, or positions)."""
    if getattr(model, "outputs", None):
        return output_names(model)
    if isinstance(called, dict):
        return [str(name) for name in called]
    if isinstance(called, list | tuple):
        return [f"output_{i}" for i in range(len(called))]
    return ["output_0"]


def _check_output(model, spec: ModelSpec, key: str, path: str) -> None:
    shape = tuple(model.outputs[0].shape) if getattr(model, "outputs", None) else None
    if shape is None:
        return  # a subclassed model without symbolic outputs: the first step checks it
    wanted = (None, *spec.input_shape[:1], spec.outputs) if spec.task == "sequence" else (None, spec.outputs)
    binary = spec.task == "classification" and spec.outputs == 2 and shape[-1] == 1  # one sigmoid or logit unit
    if len(shape) != len(wanted) or (shape[-1] != spec.outputs and not binary):
        per = "per token " if spec.task == "sequence" else ""
        raise ConfigError.single(
            key,
            path,
            f"a model whose output is {per}{spec.outputs} value(s) for "
            f"task={spec.task} (spec.outputs), shape {wanted}; yours is {shape}",
            "end the model with keras.layers.Dense(spec.outputs) (logits, or activation='softmax'; a binary "
            "classification may end in Dense(1), a logit or activation='sigmoid')",
        )
