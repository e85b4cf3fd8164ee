"""Export formats of a person's or a plugin's own (`launcher.export.yours`): an export writer named in
export.formats by import path or by an installed plugin's name (entry point group launcher.exports) is in the Plan,
writes its file beside the built-in formats, and one that cannot write fails its own format only. Entry points are
faked in this process (`support.plugins`); tests/e2e/test_user_components.py installs a real one."""

from __future__ import annotations

import numpy as np
import pytest
from fakes import CPU_PLAIN
from support import plugins
from support.config import config

from launcher.config.errors import ConfigError
from launcher.export.yours import write_yours
from launcher.plan.resolve import resolve, resolve_all


@pytest.fixture
def installed(monkeypatch):
    plugins.install(
        monkeypatch, {"launcher.exports": {"npz": "user_parts:WeightsNpz", "keras": "user_parts:HalfWriter"}}
    )


def test_your_formats_are_planned_after_the_built_in_ones_and_say_whose_they_are(installed):
    plan = resolve(config("export.formats=[saved_model,npz,user_parts:RefusingWriter,keras]"), CPU_PLAIN)
    assert plan.export.formats == ["keras", "saved_model", "npz", "user_parts:RefusingWriter"]  # keras: built-in wins
    reason = plan.export.reason("formats")
    assert "npz: your export writer (user_parts:WeightsNpz)" in reason
    assert "user_parts:RefusingWriter: your export writer" in reason


def test_an_unknown_format_is_refused_naming_the_built_in_and_installed_choices(installed):
    _, found = resolve_all(config("export.formats=[keras,onnx]"), CPU_PLAIN)
    [refused] = [v for v in found if v.key == "export.formats"]
    assert "unknown: ['onnx']" in refused.expected
    assert (
        "['keras', 'saved_model', 'tflite']" in refused.expected and "launcher.exports: keras, npz" in refused.expected
    )
    assert refused.fix == "export.formats=[keras]"


def test_a_writer_writes_its_file_and_one_that_raises_fails_its_own_format_only(tmp_path):
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")], name="tiny")
    written, failed = write_yours(model, ["user_parts:WeightsNpz", "user_parts:RefusingWriter"], tmp_path)
    assert written == {"user_parts:WeightsNpz": tmp_path / "weights.npz"}
    saved = np.load(tmp_path / "weights.npz")
    np.testing.assert_array_equal(saved["tiny.dense.kernel"], np.asarray(model.layers[0].kernel))
    assert failed == {"user_parts:RefusingWriter": "RuntimeError: this writer takes no model with Dense layers"}
    assert not (tmp_path / "never.bin").exists()


def test_an_object_without_write_is_refused_saying_what_a_writer_has(tmp_path):  # after training too
    with pytest.raises(ConfigError) as refused:
        write_yours(None, ["user_parts:HalfWriter"], tmp_path)
    [violation] = refused.value.violations
    assert violation.key == "export.formats" and "`written` (the file it writes) and `write(model, path)`" in str(
        refused.value
    )


def test_a_writer_that_cannot_write_the_untrained_model_is_refused_before_training(tmp_path):
    from types import SimpleNamespace

    import keras

    from launcher.export.trained import check_exports

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")], name="tiny")
    chosen = config("export.formats=[keras,user_parts:WeightsNpz,user_parts:RefusingWriter]")
    plan = resolve(chosen, CPU_PLAIN)
    with pytest.raises(ConfigError) as refused:
        check_exports(chosen, plan, SimpleNamespace(model=model, task=None), None)
    [violation] = refused.value.violations
    assert (violation.key, violation.value) == ("export.formats", "user_parts:RefusingWriter")
    assert "this writer takes no model with Dense layers" in violation.expected
    assert violation.fix == "export.formats=[keras,user_parts:WeightsNpz]"


@pytest.mark.parametrize(
    ("writer", "said"),
    [
        ("user_parts:HalfWriter", "`written` (the file it writes) and `write(model, path)`"),
        ("user_parts:ClobberingWriter", "not a path nor one of the launcher's own files"),
        ("user_parts:EscapingWriter", "not a path nor one of the launcher's own files"),
    ],
)
def test_a_writer_that_is_no_writer_is_refused_before_training_naming_it(tmp_path, writer, said):
    from types import SimpleNamespace

    import keras

    from launcher.export.trained import check_exports

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    chosen = config(f"export.formats=[keras,{writer}]")
    with pytest.raises(ConfigError) as refused:
        check_exports(chosen, resolve(chosen, CPU_PLAIN), SimpleNamespace(model=model, task=None), None)
    [violation] = refused.value.violations
    assert (violation.key, violation.value) == ("export.formats", writer) and said in violation.expected


def test_a_rerun_replaces_the_file_and_a_writer_that_writes_nothing_fails_its_format(tmp_path):
    import keras

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")], name="tiny")
    (tmp_path / "weights.npz").write_text("an earlier launch's file")
    (tmp_path / "nothing.bin").write_text("an earlier launch's file")
    written, failed = write_yours(model, ["user_parts:WeightsNpz", "user_parts:IdleWriter"], tmp_path)
    assert list(written) == ["user_parts:WeightsNpz"] and "tiny.dense.kernel" in np.load(tmp_path / "weights.npz")
    assert failed == {"user_parts:IdleWriter": "its writer returned without writing nothing.bin"}
    assert not list(tmp_path.glob("*.partial*"))


def test_your_formats_are_logged_under_model_and_tagged_with_a_key_mlflow_takes(tmp_path):
    import keras

    from launcher.export.serving import ServingExports
    from launcher.export.trained import Reloaded, _export_yours

    class Recorder:
        def __init__(self):
            self.files, self.tags = [], {}

        def log_artifact(self, path, folder):
            self.files.append((path.name, folder))

        def log_artifacts(self, path, folder):
            self.files.append((path.name, folder))

        def set_tags(self, tags):
            self.tags.update(tags)

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="dense")], name="tiny")
    model.save(tmp_path / "model.keras")
    tracker, exported = Recorder(), ServingExports()
    formats = ["keras", "user_parts:WeightsNpz", "user_parts:RefusingWriter"]
    _export_yours(Reloaded(tmp_path / "model.keras"), formats, tracker, tmp_path, exported)
    assert tracker.files == [("weights.npz", "model")]
    assert tracker.tags == {
        "export.user_parts.WeightsNpz": "written",
        "export.user_parts.RefusingWriter": "failed: RuntimeError: this writer takes no model with Dense layers",
    }
    assert list(exported.written) == ["user_parts:WeightsNpz"]
    assert list(exported.failed) == ["user_parts:RefusingWriter"]
