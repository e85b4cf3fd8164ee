"""Where a launch's run dir is (`launcher.launch.run_dirs`, the resolver of conf/config.yaml's hydra.run.dir) and which
launches leave none: eval and predict nest in the run they read (`launcher.launch.find_run`), explain and refused
launches remove the dir they created and never one that was there before. In-process, on directories only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.config.errors import ConfigError
from launcher.config.schema import Mode
from launcher.dirlock import DirLock
from launcher.launch import run_dirs
from launcher.launch.find_run import find_training_run
from launcher.outcome import EXIT_FAILED, EXIT_FINISHED, EXIT_REFUSED


@pytest.fixture
def here(tmp_path, monkeypatch):
    """The launch dir: the resolver reads the current directory, as Hydra's composition does."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(run_dirs, "_new", {})
    return tmp_path


def trained(here, name: str, run_id: str = "0" * 32):
    """A finished training run's dir as a launch leaves it (the files eval finds it by), a checkpoint in it."""
    run = here / "outputs" / "runs" / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("[]\n")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "ckpt-1.index").write_text("")
    (run / "outcome.json").write_text(json.dumps({"status": "FINISHED", "mode": "train", "run_id": run_id}))
    return run


def made(path):
    """What Hydra and the shell write in a new run dir before a refusal."""
    (path / ".hydra").mkdir(parents=True)
    (path / "console.log").write_text("refused\n")
    (path / "launch.lock").write_text("")
    return path


def test_a_training_launch_s_dir_is_its_name_or_a_timestamp_under_outputs_runs(here):
    assert Path(run_dirs.run_dir_for(Mode.train, "exp1", "")) == here / "outputs" / "runs" / "exp1"
    stamped = Path(run_dirs.run_dir_for("train", "", "")).relative_to(here / "outputs" / "runs")
    assert len(stamped.parts) == 2 and stamped.parts[0].count("-") == 2  # <date>/<time>
    assert run_dirs.is_new(here / "outputs" / "runs" / "exp1")


def test_eval_and_predict_nest_in_the_run_they_read_found_by_name_path_run_id_or_newest(here):
    run = trained(here, "exp1", run_id="a" * 32)
    assert Path(run_dirs.run_dir_for(Mode.eval, "check", "exp1")) == run / "eval" / "check"
    assert Path(run_dirs.run_dir_for(Mode.predict, "check", str(run))) == run / "predict" / "check"
    assert Path(run_dirs.run_dir_for("eval", "check", "a" * 32)) == run / "eval" / "check"  # its outcome.json's id
    assert Path(run_dirs.run_dir_for("eval", "", "")).parent.parent == run / "eval"  # the newest finished
    # An MLflow run id with no dir here (or no such run: the launch refuses it): outputs/<mode>, not outputs/runs.
    assert Path(run_dirs.run_dir_for("predict", "x", "b" * 32)) == here / "outputs" / "predict" / "x"


def test_an_eval_of_a_run_this_user_cannot_write_in_writes_under_outputs(here, monkeypatch):
    run = trained(here, "exp1").resolve()  # a colleague's, read-only
    monkeypatch.setattr(run_dirs.os, "access", lambda path, mode: Path(path).resolve() != run)
    assert Path(run_dirs.run_dir_for("eval", "x", "exp1")) == here / "outputs" / "eval" / "x"


def test_an_eval_nested_in_a_run_is_neither_a_run_eval_finds_nor_one_it_suggests(here):
    run = trained(here, "exp1")
    nested = made(run / "eval" / "2026-12-07" / "16-00-00-000000")
    (nested / ".hydra" / "overrides.yaml").write_text("[]\n")
    (nested / "outcome.json").write_text(json.dumps({"status": "FINISHED", "mode": "eval", "run_id": "c" * 32}))
    assert find_training_run("", here, "") == run.resolve()
    with pytest.raises(ConfigError, match=r"recent: \['exp1'\]"):
        find_training_run("nope", here, "")


@pytest.mark.parametrize(
    ("mode", "explain", "code", "leaves"),
    [
        ("train", True, EXIT_FINISHED, True),
        ("train", False, EXIT_REFUSED, True),
        ("eval", False, EXIT_REFUSED, True),
        ("predict", True, EXIT_FINISHED, False),  # explain is training's: an eval's outputs stay
        ("train", False, EXIT_FINISHED, False),
        ("train", True, EXIT_FAILED, False),  # a failed launch keeps its console.log and traceback
        ("local_workers", False, EXIT_REFUSED, False),  # its workers write in the dir
    ],
)
def test_which_launches_leave_no_run_dir(mode, explain, code, leaves):
    assert run_dirs.leaves_no_run_dir(mode, explain, code) is leaves


def test_a_new_run_dir_is_removed_with_the_parents_it_created_and_nothing_beside_it(here):
    earlier = here / "outputs" / "runs" / "2026-12-07" / "09-00-00-000000"
    earlier.mkdir(parents=True)
    first = made(Path(run_dirs.run_dir_for("train", "", "")))
    assert run_dirs.discard_new_run_dir(first)
    assert not first.exists() and earlier.is_dir()
    assert first.parent.exists() == (first.parent == earlier.parent)  # its date dir went, unless it was there
    refused = made(Path(run_dirs.run_dir_for("eval", "x", "")))  # no run to read: the eval is refused
    assert refused == here / "outputs" / "eval" / "x"
    assert run_dirs.discard_new_run_dir(refused) and not (here / "outputs" / "eval").exists()
    assert not run_dirs.discard_new_run_dir(refused)  # once


def test_a_dir_that_was_there_before_the_launch_is_never_removed(here):
    run = trained(here, "exp1")
    (run / "console.log").write_text("the training's console\n")
    assert Path(run_dirs.run_dir_for("train", "exp1", "")) == run  # a refused resume of exp1
    assert not run_dirs.is_new(run)
    assert not run_dirs.discard_new_run_dir(run)
    assert (run / "checkpoints" / "ckpt-1.index").is_file() and (run / "console.log").read_text()
    given = made(here / "given")  # hydra.run.dir=given: the resolver never chose it
    assert not run_dirs.discard_new_run_dir(given) and given.is_dir()


def test_a_new_dir_another_launch_holds_by_now_is_kept(here, capsys):
    run = made(Path(run_dirs.run_dir_for("train", "exp2", "")))
    with DirLock(run):  # a second launch of name=exp2, started meanwhile
        assert not run_dirs.discard_new_run_dir(run)
    assert run.is_dir() and "kept" in capsys.readouterr().err
