"""A person's builder or loader that raises is refused with their own frames (file:line) and the whole message."""

from __future__ import annotations

import textwrap

import pytest
from support.config import config

from launcher.config.errors import ConfigError
from launcher.config.raised import told
from launcher.train.registry import DATASETS

LOADER = """
def read_rows(path):
    raise FileNotFoundError("no rows in " + path + ": " + "the file holds only a header line; " * 12)


def load(path="rows.csv"):
    return read_rows(path)
"""

LAYER = """
import keras


class Broken(keras.layers.Layer):
    def call(self, x):
        raise ValueError("this layer cannot take " + "wide inputs " * 40)


def build(spec, **params):
    inputs = keras.Input((5,))
    return keras.Model(inputs, Broken()(inputs))
"""


def _module(tmp_path, monkeypatch, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return str(tmp_path / f"{name}.py")


def test_a_loader_that_raises_is_refused_with_its_own_frames_and_the_whole_message(tmp_path, monkeypatch):
    path = _module(tmp_path, monkeypatch, "raising_loader", LOADER)
    with pytest.raises(ConfigError) as refused:
        DATASETS.get("custom").load(config("dataset=custom", "dataset.loader=raising_loader:load").dataset)
    text = str(refused.value)
    assert f"{path}:7 in load: return read_rows(path)" in text
    assert f"{path}:3 in read_rows: raise FileNotFoundError(" in text
    assert ("the file holds only a header line; " * 12).strip() in text  # whole, not cut at 300 characters
    assert "launcher/" not in text.split("raised at:")[1]  # the launcher's own frames are not the person's
    assert text.index("raised at:") < text.index("fix: fix the loader where it raised")


def test_a_keras_error_in_a_builder_is_told_without_colour_codes_at_the_persons_line(tmp_path, monkeypatch):
    path = _module(tmp_path, monkeypatch, "raising_builder", LAYER)
    import raising_builder

    with pytest.raises(Exception) as raised:
        raising_builder.build(None)
    assert "\x1b[" in str(raised.value)  # Keras colours its layer errors
    text = told(raised.value, raising_builder.build)
    assert "\x1b[" not in text
    assert ("wide inputs " * 40).strip() in text
    assert f"{path}:12 in build: return keras.Model(inputs, Broken()(inputs))" in text
    assert f"{path}:7 in call: raise ValueError(" in text
    assert "site-packages" not in text.split("raised at:")[1]


def test_an_installed_single_file_plugin_s_frames_are_its_own_and_other_installed_code_is_not(tmp_path, monkeypatch):
    from pathlib import Path

    from launcher.config import raised

    site = tmp_path / "site-packages"
    site.mkdir()
    (site / "library_below.py").write_text("def fail():\n    raise KeyError('missing column: price')\n")
    (site / "single_plugin.py").write_text("import library_below\n\n\ndef load():\n    return library_below.fail()\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(raised, "_NOT_THEIRS", raised._NOT_THEIRS | {Path(site).resolve()})
    import single_plugin

    with pytest.raises(KeyError) as err:
        single_plugin.load()
    text = told(err.value, single_plugin.load)
    assert f"{site / 'single_plugin.py'}:5 in load: return library_below.fail()" in text
    assert "library_below.py" not in text  # installed code that is not the plugin's
    assert "single_plugin.py" not in told(err.value)  # without the component, installed code is not the person's


def test_a_module_that_raises_on_import_is_refused_with_the_line_that_raised(tmp_path, monkeypatch):
    from launcher.config.imports import import_component

    path = _module(tmp_path, monkeypatch, "raising_on_import", "import json\n\nSETTINGS = json.loads('{broken')\n")
    with pytest.raises(ConfigError) as refused:
        import_component("model.builder", "raising_on_import:build", "a model builder function")
    text = str(refused.value)
    assert "JSONDecodeError: Expecting property name enclosed in double quotes" in text
    assert f"{path}:3 in <module>: SETTINGS = json.loads('{{broken')" in text
