"""The export format table (`launcher.config.exports`) against what writes and copies the formats: every served
format is written by `launcher.export.serving.export_serving` where the table says, and every written format the
table copies lands beside the remote checkpoints (`launcher.export.trained.copy_beside_checkpoints`,
`launcher.launch.remote.RemoteCheckpoints.push_folder`). In-process, the TensorFlow writers replaced by fakes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from launcher.config.exports import EXPORT_FORMATS, served_formats
from launcher.export import serving
from launcher.export.trained import copy_beside_checkpoints
from launcher.launch.remote import RemoteCheckpoints


class FakeInputs:
    def example(self, source, count):
        return {"inputs": [[0.0]] * count}


def fake_saved_model(model, task, inputs, path: Path) -> None:
    path.mkdir()
    (path / "saved_model.pb").write_text("graph")
    (path / "variables").mkdir()
    (path / "variables" / "variables.index").write_text("index")


def fake_tflite(model, task, inputs, path: Path, example, reference) -> str:
    assert reference.is_dir()  # converted from the SavedModel
    path.write_text("flatbuffer")
    return "max |diff| 0 vs the SavedModel"


def test_every_served_format_in_the_table_is_written_where_the_table_says(monkeypatch, tmp_path):
    monkeypatch.setattr(serving, "served_inputs", lambda source, model: FakeInputs())
    monkeypatch.setattr(serving, "export_saved_model", fake_saved_model)
    monkeypatch.setattr(serving, "export_tflite", fake_tflite)
    served = served_formats(EXPORT_FORMATS)
    assert served  # the table has formats made from the served function
    done = serving.export_serving(object(), None, None, tmp_path, served)
    assert done.failed == {}
    assert done.written == {name: tmp_path / EXPORT_FORMATS[name].written for name in served}
    assert all(path.exists() for path in done.written.values())
    # TFLite alone: the SavedModel it is converted from is not left behind.
    (tmp_path / "alone").mkdir()
    alone = serving.export_serving(object(), None, None, tmp_path / "alone", ["tflite"])
    assert list(alone.written) == ["tflite"] and not (tmp_path / "alone" / "saved_model").exists()


def test_the_formats_not_served_are_the_keras_model_that_export_trained_always_writes():
    """A format neither served nor keras would have nothing writing it: export_trained writes model.keras only."""
    assert {name for name, f in EXPORT_FORMATS.items() if not f.served} == {"keras"}
    assert EXPORT_FORMATS["keras"].written == "model.keras" and EXPORT_FORMATS["keras"].always


class RecordingRemote:
    def __init__(self):
        self.pushed: list[str] = []

    def push_file(self, file: Path, name: str | None = None) -> None:
        self.pushed.append(Path(file).name)

    def push_folder(self, folder: Path) -> None:
        self.pushed.append(f"{folder.name}/")


def test_every_written_format_the_table_copies_goes_beside_the_remote_checkpoints(tmp_path, monkeypatch):
    written = {}
    for name, f in EXPORT_FORMATS.items():
        path = tmp_path / f.written
        if name == "saved_model":
            fake_saved_model(None, None, None, path)
        else:
            path.write_text(name)
        written[name] = path
    best = tmp_path / "best.keras"
    best.write_text("best")
    remote = RecordingRemote()
    copy_beside_checkpoints(remote, written, best)
    expected = [f"{f.written}/" if written[n].is_dir() else f.written for n, f in EXPORT_FORMATS.items()]
    assert remote.pushed == [expected[0], "best.keras", *expected[1:]]  # best.keras with model.keras
    # A format the table does not copy stays on this disk.
    monkeypatch.setitem(EXPORT_FORMATS, "tflite", replace(EXPORT_FORMATS["tflite"], remote_copy=False))
    remote = RecordingRemote()
    copy_beside_checkpoints(remote, written)
    assert "model.tflite" not in remote.pushed and "model.keras" in remote.pushed


def test_a_folder_is_copied_file_by_file_under_its_name(tmp_path):
    folder = tmp_path / "saved_model"
    fake_saved_model(None, None, None, folder)
    remote = RemoteCheckpoints(f"memory://bucket-{tmp_path.name}/run")
    remote.push_folder(folder)
    found = sorted(p.split("/run/", 1)[1] for p in remote.fs.find(remote.root))
    assert found == ["saved_model/saved_model.pb", "saved_model/variables/variables.index"]
