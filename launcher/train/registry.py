"""Name -> builder module for models and datasets; errors list the choices.

Built-in models come from the model table (`launcher.config.models`), built-in datasets from the dataset
table (`launcher.config.datasets`). `custom` and every installed plugin (entry points `launcher.models` /
`launcher.datasets`) go through the one module per kind that imports what the config names (`user_model` /
`user_data`). Only the module a run names is imported.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from launcher.config.datasets import DATASET_KINDS
from launcher.config.errors import ConfigError
from launcher.config.imports import plugins
from launcher.config.models import MODEL_KINDS
from launcher.train import user_data, user_model


class Registry:
    """The builder modules of one kind (`model` or `dataset`), looked up by the config's name."""

    def __init__(self, key: str, modules: dict[str, str], user_module: ModuleType):
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
            return self.user_module
        raise ConfigError.single(
            f"{self.key}.name",
            name,
            f"one of {self.choices} (custom: yours by import path; others: installed plugins)",
            f"{self.key}={self.choices[0]}",
        )


MODELS = Registry("model", {kind.name: kind.builder for kind in MODEL_KINDS.values()}, user_model)
DATASETS = Registry("dataset", {kind.name: kind.loader for kind in DATASET_KINDS.values()}, user_data)
