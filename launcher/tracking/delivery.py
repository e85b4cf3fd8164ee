"""Writes leave the step loop through a queue that one thread delivers, in order, through any outage.

Metric points wait up to METRIC_GAP seconds to go together (one store transaction a second instead of one
per point: on a 2-core machine that CPU is the step loop's). A server that does not answer starts an
outage: the writes stay queued and are tried again every RETRY_SECONDS; a write the server refuses is
dropped and raised to the caller at its next write or flush (the writes after it still go).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

from launcher.tracking.client import is_outage
from launcher.tracking.uri import redact
from launcher.tracking.writes import Write, coalesced

METRIC_GAP = 1.0  # seconds metric points may wait in the queue to be sent together
RETRY_SECONDS = 5.0  # during an outage, how often a write tries the server again


class Delivery:
    """The queue of one run's writes and the thread that sends them with `send(write)`."""

    def __init__(
        self,
        send: Callable[[Write], None],
        describe_server: str,
        retry_seconds: float = RETRY_SECONDS,
        metric_gap: float = METRIC_GAP,
    ):
        self.send = send
        self.describe_server = describe_server
        self.retry_seconds = retry_seconds
        self.metric_gap = metric_gap
        self.pending: list[Write] = []  # writes the server has not taken yet, in order
        self.outage = False
        self._changed = threading.Condition()  # guards pending, outage, _refused, _closing, _hurry
        self._refused: BaseException | None = None
        self._closing = False
        self._hurry = 0  # flush() / close() waiting: deliver metric points without gathering
        self._next_try = 0.0
        self._last_delivery = 0.0
        self._thread: threading.Thread | None = None

    def put(self, write: Write, check: bool = True) -> None:
        """Queue a write (the thread starts with the first); raise a refusal from an earlier one first."""
        with self._changed:
            if check:
                self._raise_refused()
            self.pending.append(write)
            if self._thread is None:
                self._thread = threading.Thread(target=self._deliver_forever, name="mlflow-delivery", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def flush(self) -> None:
        """Wait until every write so far is delivered (or an outage keeps them); raise what was refused."""
        with self._changed:
            self._hurry += 1
            self._changed.notify_all()
            try:
                while self.pending and not self.outage and self._refused is None:
                    self._changed.wait()
            finally:
                self._hurry -= 1
            self._raise_refused()

    def close(self, outage_wait: float) -> list[Write]:
        """Deliver what is queued, waiting up to `outage_wait` s through an outage; what is left undelivered."""
        deadline = time.monotonic() + outage_wait
        with self._changed:
            self._hurry += 1
            self._changed.notify_all()
            while self.pending:
                if self.outage and time.monotonic() >= deadline:
                    break
                self._changed.wait(0.5)
            self._closing = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)  # a write in flight finishes (or times out) before the rest is kept
        left, self.pending = self.pending, []
        return left

    def take_refusal(self) -> BaseException | None:
        refused, self._refused = self._refused, None
        return refused

    def _raise_refused(self) -> None:
        refused = self.take_refusal()
        if refused is not None:
            raise refused

    def _deliver_forever(self) -> None:
        while True:
            with self._changed:
                while not self._closing and not self.pending:
                    self._changed.wait()
                if self._closing and (self.outage or not self.pending):
                    return  # close() hands what an outage left to the caller
                wait = self._next_try - time.monotonic()
                if wait > 0:  # in an outage: try again later (or sooner, if close() is waiting)
                    self._changed.wait(wait)
                    continue
                gather = self._last_delivery + self.metric_gap - time.monotonic()
                if gather > 0 and not self._hurry and all(w.kind == "metrics" for w in self.pending):
                    self._changed.wait(gather)
                    continue
            self._deliver_queued()
            self._last_delivery = time.monotonic()

    def _deliver_queued(self) -> None:
        """Send what is queued, in order, until the queue is empty or the server does not answer."""
        while True:
            with self._changed:
                if not self.pending:
                    self._changed.notify_all()
                    return
                write, taken = coalesced(self.pending)
            try:
                self.send(write)
            except Exception as err:
                with self._changed:
                    if is_outage(err):
                        self._mark_outage(err)
                    else:  # refused by a server that answered: raised to the caller, the writes after it go
                        del self.pending[:taken]
                        self._refused = err
                    self._changed.notify_all()
                return
            with self._changed:
                del self.pending[:taken]
                if self.outage:
                    print("Tracking server back: delivered the writes kept during the outage.", flush=True)
                    self.outage = False
                self._changed.notify_all()

    def _mark_outage(self, err: BaseException) -> None:
        if not self.outage:
            print(
                f"WARNING: tracking server {self.describe_server} unreachable ({redact(str(err))[:160]}); "
                "training goes on, MLflow writes are kept and delivered when it answers.",
                file=sys.stderr,
                flush=True,
            )
            self.outage = True
        self._next_try = time.monotonic() + self.retry_seconds
