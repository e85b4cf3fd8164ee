"""models/ and datasets/ never shadow the PyPI packages of the same names."""

from __future__ import annotations

import os

from support.cli import run_python as python_c
from support.config import ROOT


def run_python(code: str, extra_path: str | None = None):
    env = dict(os.environ)
    if extra_path:
        env["PYTHONPATH"] = extra_path
    return python_c(code, env)


def test_top_level_folders_are_not_packages():
    assert not (ROOT / "models" / "__init__.py").exists()
    assert not (ROOT / "datasets" / "__init__.py").exists()


def test_hugging_face_datasets_wins_from_the_repo_root():
    done = run_python(
        "import datasets, launcher_datasets.digits as d; "
        "print(datasets.__file__); print(hasattr(datasets, 'load_dataset')); print(d.__file__)"
    )
    assert done.returncode == 0, done.stderr
    hf_file, has_loader, ours = done.stdout.split()
    assert "site-packages" in hf_file and has_loader == "True"
    assert ours.startswith(str(ROOT / "datasets"))


def test_a_pypi_models_package_wins_too(tmp_path):
    fake = tmp_path / "site" / "models"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("ORIGIN = 'pypi'\n")
    done = run_python("import models, launcher_models.mlp; print(models.ORIGIN)", str(tmp_path / "site"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "pypi"


def test_mlflow_imports_hugging_face_datasets_beside_the_launcher():
    done = run_python(
        "import launcher_datasets.digits, mlflow.data.huggingface_dataset as h, datasets; "
        "print(type(h).__name__, datasets.Dataset.__module__)"
    )
    assert done.returncode == 0, done.stderr
    assert "datasets.arrow_dataset" in done.stdout
