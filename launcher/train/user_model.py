"""`model=custom model.builder=pkg.mod:build` (or an installed plugin): the user's Keras model.

`check` imports the builder and checks its signature with the data loaded, before anything is built;
`build` calls it inside the strategy scope under the Plan's dtype policy (as the built-in builders are)
and refuses what the engine cannot train: not a keras.Model, an output that does not fit the task.
"""

from __future__ import annotations

from launcher.config.errors import ConfigError
from launcher.config.imports import check_call, configured_path, import_component
from launcher.train.model_io import ModelSpec

SHOWN_SIGNATURE = "build(spec, **params) -> keras.Model (spec: input_shape, outputs, task, kind, vocab_size)"


def _builder(cfg, source):
    key, path = configured_path("model", "builder", cfg)
    function = import_component(key, path, "a model builder function")
    check_call(key, path, function, (ModelSpec.of(source),), dict(cfg.params), SHOWN_SIGNATURE)
    return key, path, function


def check(cfg, source) -> None:
    _builder(cfg, source)


def build(cfg, source):
    import keras

    key, path, function = _builder(cfg, source)
    spec = ModelSpec.of(source)
    try:
        model = function(spec, **dict(cfg.params))
    except ConfigError:
        raise
    except Exception as err:
        raise ConfigError.single(
            key,
            path,
            f"a builder that runs ({type(err).__name__}: {str(err)[:300]})",
            "fix the builder (python -c 'from <module> import <builder>' and call it to see the traceback)",
        ) from None
    if not isinstance(model, keras.Model):
        raise ConfigError.single(
            key,
            path,
            f"a builder that returns a keras.Model (it returned {type(model).__name__})",
            "return keras.Model(inputs, outputs) from the builder",
        )
    if not model.built or not model.outputs:
        try:
            model(keras.ops.zeros((1, *spec.input_shape), dtype=spec.input_dtype))
        except Exception as err:
            raise ConfigError.single(
                key,
                path,
                f"a model that accepts inputs of shape {spec.input_shape} ({type(err).__name__}: {str(err)[:200]})",
                "build the model with keras.Input(shape=spec.input_shape)",
            ) from None
    _check_output(model, spec, key, path)
    return model


def _check_output(model, spec: ModelSpec, key: str, path: str) -> None:
    shape = tuple(model.outputs[0].shape) if getattr(model, "outputs", None) else None
    if shape is None:
        return  # a subclassed model without symbolic outputs: the first step checks it
    wanted = (None, *spec.input_shape[:1], spec.outputs) if spec.task == "sequence" else (None, spec.outputs)
    if len(shape) != len(wanted) or shape[-1] != spec.outputs:
        per = "per token " if spec.task == "sequence" else ""
        raise ConfigError.single(
            key,
            path,
            f"a model whose output is {per}{spec.outputs} value(s) for "
            f"task={spec.task} (spec.outputs), shape {wanted}; yours is {shape}",
            "end the model with keras.layers.Dense(spec.outputs) (logits, no activation)",
        )
