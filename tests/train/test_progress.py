"""An epoch's progress on a terminal (`launcher.train.progress`): Keras's bar while the epoch trains, replaced by the
epoch line, so a terminal shows each epoch's numbers once, one line per epoch, as a log file does."""

from __future__ import annotations

import io
import sys

from support.train import engine_for

from launcher.console import _Lines
from launcher.train.progress import LiveBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def on_screen(written: str) -> list[str]:
    """What a terminal shows once `written` is drawn: a carriage return or a backspace redraws the line (the
    transcript's reading of a console, which drops the escape codes too)."""
    screen = io.StringIO()
    lines = _Lines(screen)
    lines.feed(written)
    lines.close()
    return screen.getvalue().splitlines()


def test_a_terminal_shows_each_epochs_numbers_once_on_its_epoch_line(tmp_path, monkeypatch):
    engine = engine_for(tmp_path, "train.steps_per_execution=4")
    engine.verbose = 1
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    engine.fit(2)
    written = terminal.getvalue()
    assert "━" in written and "\x1b[2K" in written  # the bar was drawn while the epoch trained, then erased
    screen = on_screen(written)
    assert [line.split(":")[0] for line in screen] == ["  epoch 1/2", "  epoch 2/2"], screen
    assert "val_loss=" in screen[0] and screen[0].count("loss=") == 2  # loss and val_loss, once each


def test_no_bar_off_a_terminal(monkeypatch):
    assert LiveBar.on_terminal(10, ["loss"], verbose=1) is None  # pytest's captured stdout is no terminal
    monkeypatch.setattr(sys, "stdout", Terminal())
    assert LiveBar.on_terminal(10, ["loss"], verbose=0) is None  # verbose=0: neither bar nor epoch lines
    assert LiveBar.on_terminal(10, ["loss"], verbose=1) is not None
