"""Which model `eval.model` names in a training run (`launcher.inference.evaluate.trained_model`), and a refusal
whose fix names a model the run has: never the value that was just refused."""

from __future__ import annotations

import pytest

from launcher.config.errors import Violation
from launcher.inference.evaluate import trained_model

pytestmark = pytest.mark.unit


def _run(tmp_path, *files: str):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for name in files:
        (run / name).write_text("")
    return run


def test_final_best_a_file_and_a_checkpoint_prefix_are_found(tmp_path):
    run = _run(tmp_path, "model.keras", "best.keras", "checkpoints/ckpt-46.index", "mine.keras")
    assert trained_model("final", run, tmp_path) == run / "model.keras"
    assert trained_model("best", run, tmp_path) == run / "best.keras"
    assert trained_model("run/mine.keras", run, tmp_path) == run / "mine.keras"  # from where the command runs
    assert trained_model(str(run / "checkpoints" / "ckpt-46"), run, tmp_path) == run / "checkpoints" / "ckpt-46"


@pytest.mark.parametrize(
    ("wanted", "files", "fix"),
    [
        ("final", ["best.keras"], "eval.model=best"),  # checkpoint.export_model=false, a best model kept
        ("best", ["model.keras"], "eval.model=final"),  # no checkpoint.monitor
        # The latest complete checkpoint (its sidecar written), not a half-written one after it.
        ("final", ["checkpoints/ckpt-23.index", "checkpoints/ckpt-23.json", "checkpoints/ckpt-46.index"], "ckpt-23 "),
        ("gone.keras", ["model.keras"], "eval.model=final"),
        ("final", [], "train the run first"),
    ],
)
def test_a_model_the_run_lacks_is_refused_with_one_it_has(tmp_path, wanted, files, fix):
    refused = trained_model(wanted, _run(tmp_path, *files), tmp_path)
    assert isinstance(refused, Violation) and refused.key == "eval.model" and refused.value == wanted
    assert fix in refused.fix
    assert f"eval.model={wanted}" not in refused.fix
