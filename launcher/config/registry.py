"""Name -> builder module for models and datasets; errors list the choices.

`custom` and every installed plugin (entry points `launcher.models` / `launcher.datasets`) go through
one module per kind that imports what the config names (launcher.train.user_model / user_data).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from launcher.config.errors import ConfigError
from launcher.config.imports import plugins


class Registry:
    def __init__(self, key: str, modules: dict[str, str], user_module: str):
        self.key = key
        self.modules = modules
        self.user_module = user_module

    @property
    def choices(self) -> list[str]:
        return sorted({*self.modules, "custom", *plugins(self.key)})

    def get(self, name: str) -> ModuleType:
        if name in self.modules:
            return importlib.import_module(self.modules[name])
        if name == "custom" or name in plugins(self.key):
            return importlib.import_module(self.user_module)
        raise ConfigError.single(
            f"{self.key}.name", name, f"one of {self.choices} (custom: yours by import path; others: installed "
            "plugins)", f"{self.key}={self.choices[0]}"
        )


MODELS = Registry(
    "model",
    {name: f"launcher_models.{name}" for name in ("mlp", "cnn", "resnet", "transformer")},
    "launcher.train.user_model",
)
DATASETS = Registry(
    "dataset",
    {name: f"launcher_datasets.{name}" for name in ("digits", "synthetic", "npz", "image_folder", "tfrecord")},
    "launcher.train.user_data",
)
