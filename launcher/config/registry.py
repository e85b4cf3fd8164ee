"""Name -> builder module for models and datasets; errors list the choices."""

from __future__ import annotations

import importlib
from types import ModuleType

from launcher.config.errors import ConfigError


class Registry:
    def __init__(self, key: str, modules: dict[str, str]):
        self.key = key
        self.modules = modules

    @property
    def choices(self) -> list[str]:
        return sorted(self.modules)

    def get(self, name: str) -> ModuleType:
        if name not in self.modules:
            raise ConfigError.single(
                f"{self.key}.name", name, f"one of {self.choices}", f"{self.key}={self.choices[0]}"
            )
        return importlib.import_module(self.modules[name])


MODELS = Registry(
    "model",
    {name: f"launcher_models.{name}" for name in ("mlp", "cnn", "resnet", "transformer")},
)
DATASETS = Registry(
    "dataset",
    {name: f"launcher_datasets.{name}" for name in ("digits", "synthetic", "npz", "image_folder", "tfrecord")},
)
