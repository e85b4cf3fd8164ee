"""A launch keeps its console in its run dir (`launcher.console.transcript`, used by `launcher.launch.shell`): what
a person saw, progress-bar redraws collapsed to what was left on screen, no colour codes, a header per launch. The
CLI runs (the file beside the run and in MLflow, refusals and failures too) are in tests/e2e/test_cli.py."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from launcher.console import _Lines, transcript

pytestmark = pytest.mark.unit


def _cleaned(*writes: str) -> str:
    out = io.StringIO()
    lines = _Lines(out)
    for text in writes:
        lines.feed(text)
    lines.close()
    return out.getvalue()


def test_a_redrawn_line_keeps_what_was_left_on_screen_and_colour_codes_are_dropped():
    # Keras's progress bar on a terminal: backspaces and a carriage return, then the line drawn again.
    bar = "1/3 [=>...] loss: 2.1" + "\b" * 21 + "\r" + "2/3 [==>..] loss: 1.9" + "\b" * 21 + "\r"
    assert _cleaned(bar, "3/3 [=====] loss: 1.5\n") == "3/3 [=====] loss: 1.5\n"
    assert _cleaned("\x1b[33mAdd type hints\x1b[0m to predict\n", "\x1b]0;title\x07done\n") == (
        "Add type hints to predict\ndone\n"
    )
    assert _cleaned("windows line\r\n", "next\r", "\n") == "windows line\nnext\n"  # \r then \n: a plain newline
    assert _cleaned("ab\bc", "\bd") == "ad\n"  # a last line without its newline is kept at the end


def test_stdout_and_stderr_go_to_the_console_and_the_file_and_each_launch_is_appended(tmp_path, capsys):
    path = tmp_path / "console.log"
    for launch in ("first", "second"):
        with transcript(path):
            print(f"{launch} plan")
            print(f"{launch} refused", file=sys.stderr)
        print("after: not kept")
    seen = capsys.readouterr()
    assert seen.out.count("plan") == 2 and seen.err.count("refused") == 2  # the console still shows everything
    kept = path.read_text().splitlines()
    assert [line for line in kept if not line.startswith("--- launch of")] == [
        "first plan",
        "first refused",
        "second plan",
        "second refused",
    ]
    assert sum(line.startswith("--- launch of") for line in kept) == 2


def test_a_terminal_stays_a_terminal_so_keras_still_draws_its_bar(tmp_path, monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr(sys, "stdout", Terminal())
    with transcript(tmp_path / "console.log"):
        assert sys.stdout.isatty() and sys.stdout.encoding is None  # what the wrapped stream says
        sys.stdout.write("1/2" + "\b" * 3 + "\r" + "2/2\n")
    assert "2/2" in sys.stdout.getvalue() and (tmp_path / "console.log").read_text().endswith("\n2/2\n")


def test_a_full_disk_stops_the_transcript_not_the_launch(capsys):
    before = sys.stdout, sys.stderr
    with transcript(Path("/dev/full")):  # every write fails: ENOSPC
        print("still on the console")
    seen = capsys.readouterr()
    assert "still on the console" in seen.out
    assert "the console is no longer kept in /dev/full (No space left on device)" in seen.err
    assert (sys.stdout, sys.stderr) == before


def test_numbers_print_as_people_read_them():
    from launcher.console import readable

    assert [readable(v) for v in (359.0, 40759.8082, 60594.2949, 896.2, 0.8496, 1.0987, 0.0002331, 12345.0)] == [
        "359",  # a count, not 359.0000
        "40,760",  # a rate, not 4.076e+04 or 40759.8082
        "60,594",
        "896.2",
        "0.8496",
        "1.099",
        "0.0002331",
        "12,345",
    ]
    assert readable(float("nan")) == "nan" and readable(float("inf")) == "inf"


def test_kept_text_goes_to_the_transcript_only(tmp_path, capsys):
    from launcher.console import keep

    keep("no transcript: nowhere")
    with transcript(tmp_path / "console.log"):
        keep("Plan:\n  process.is_chief  False")
        print("Plan: the chief's")
    assert "is_chief" not in capsys.readouterr().out
    kept = (tmp_path / "console.log").read_text().splitlines()[1:]
    assert kept == ["Plan:", "  process.is_chief  False", "Plan: the chief's"]
    keep("after the launch: nowhere")
    assert "nowhere" not in (tmp_path / "console.log").read_text()


def test_a_print_inside_a_print_such_as_a_signal_handlers_does_not_deadlock():
    """The preemption guard's signal handler prints; the signal can land while this thread is inside the
    transcript's own write (it held a plain lock: the launch froze and never saved)."""
    import threading

    class Interrupted(io.StringIO):
        def write(self, text):
            if not getattr(self, "nested", False):
                self.nested = True
                lines.feed("Signal SIGTERM again\n")  # what the handler's print does, on this same thread
            return super().write(text)

    out = Interrupted()
    lines = _Lines(out)
    worker = threading.Thread(target=lines.feed, args=("epoch 3/5: loss=0.1\n",), daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive()
    assert "Signal SIGTERM again" in out.getvalue() and "epoch 3/5" in out.getvalue()


def test_a_console_whose_reader_is_gone_ends_the_transcript_cleanly(tmp_path, monkeypatch):
    class Gone(io.StringIO):
        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    gone = Gone()
    monkeypatch.setattr(sys, "stdout", gone)
    with transcript(tmp_path / "console.log"):
        print("last words")
    assert sys.stdout is gone  # given back, and nothing raised out of the transcript


def test_logging_to_the_console_is_kept_and_a_stream_kept_past_the_launch_is_harmless(tmp_path, capsys):
    import logging

    handler = logging.StreamHandler(sys.stdout)  # as Hydra's console handler: made before the launch
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with transcript(tmp_path / "console.log"):
            logging.getLogger("botocore").warning("Found credentials in environment variables.")
            late = logging.StreamHandler(sys.stderr)  # made during the launch: holds the transcript's stream
        assert handler.stream is sys.stdout
        late.stream.write("after the launch\n")  # the transcript's file is closed: the console still gets it
    finally:
        root.removeHandler(handler)
    assert "Found credentials in environment variables." in (tmp_path / "console.log").read_text()
    assert "after the launch" in capsys.readouterr().err
