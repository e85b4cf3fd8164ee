"""An epoch's progress on a terminal: Keras's progress bar while the epoch trains, replaced by the epoch line.

The bar shows the steps done, the time left and the running loss and metrics; at the epoch's end it is erased, and
the epoch line (`  epoch 1/5: loss=... val_loss=...`, printed once validation is done) is what stays: each epoch's
numbers once on screen, one line per epoch, as in a log file or the run dir's console.log, where no bar is drawn.
"""

from __future__ import annotations

import sys

import keras

ERASE_LINE = "\r\x1b[2K"  # back to the line's start, the whole line cleared (VT100)


class LiveBar:
    """Keras's `Progbar` over one epoch's steps, never finalised (a final bar would repeat the epoch line's numbers):
    `erase` clears it before anything else is printed; the next `show` draws it again."""

    def __init__(self, steps: int, shown: list[str]):
        # The values shown are the epoch's running ones already: displayed as given, not averaged again.
        self.bar = keras.utils.Progbar(steps, unit_name="step", stateful_metrics=shown)
        self.drawn = False

    @classmethod
    def on_terminal(cls, steps: int, shown: list[str], verbose: int) -> LiveBar | None:
        """A bar only on a terminal: in a log file (CI, Slurm) its redraws are noise and the epoch line says it all."""
        return cls(steps, shown) if verbose and sys.stdout.isatty() else None

    def show(self, step: int, values: dict[str, float]) -> None:
        self.bar.update(step, values=list(values.items()), finalize=False)
        self.drawn = True

    def erase(self) -> None:
        if self.drawn:
            sys.stdout.write(ERASE_LINE)
            sys.stdout.flush()
            self.drawn = False
