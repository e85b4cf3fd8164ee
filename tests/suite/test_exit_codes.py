"""The suite's guard that every launch's exit code is looked at (`support.exit_codes`)."""

from __future__ import annotations

from support.exit_codes import Launched, unread_exit_codes


def test_a_launch_whose_exit_code_is_never_read_is_reported_with_its_command_and_code():
    assert unread_exit_codes() is None  # the autouse guard cleared what earlier tests started
    Launched(["python", "-m", "launcher", "hydra.run.dir=/tmp/x", "precision=mixed"], 134, "Done", "")
    read = Launched(["python", "-m", "launcher", "explain=true"], 0, "", "")
    assert read.returncode == 0
    problem = unread_exit_codes()
    assert problem is not None
    assert "1 launch(es)" in problem and "exit 134" in problem and "precision=mixed" in problem
    assert "hydra.run.dir" not in problem
    assert unread_exit_codes() is None  # reported once


def test_check_returncode_counts_as_reading_it():
    Launched(["python", "-m", "launcher"], 0, "", "").check_returncode()
    assert unread_exit_codes() is None
