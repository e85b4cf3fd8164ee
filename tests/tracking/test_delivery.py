"""The tracker's delivery, spool and write records against a fake MLflow client: order, batching, outages,
refusals and the spool's format, without a server."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from launcher.tracking.client import METRIC_BATCH
from launcher.tracking.delivery import Delivery
from launcher.tracking.spool import Spool
from launcher.tracking.writes import Artifact, Metrics, Params, Tags, Terminate, coalesced, from_line, to_line


class FakeServer:
    """Records what it receives; `down` makes it unreachable, `refuse` makes it refuse params."""

    def __init__(self):
        self.received: list = []
        self.threads: set[str] = set()
        self.down = False
        self.refuse = False
        self.calls = 0

    def send(self, write) -> None:
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        if self.down:
            raise ConnectionError("Connection refused")
        if self.refuse and isinstance(write, Params):
            raise ValueError("INVALID_PARAMETER_VALUE: changing param values is not allowed")
        self.received.append(write)


def point(step: int, key: str = "step/loss") -> Metrics:
    return Metrics(((key, 1.0 / (step + 1), 0, step),))


def delivery(server: FakeServer, retry: float = 0.05) -> Delivery:
    return Delivery(server.send, "fake", retry_seconds=retry, metric_gap=0.0)


def test_writes_arrive_in_order_off_the_calling_thread_with_metric_points_batched():
    server = FakeServer()
    queue = delivery(server)
    queue.put(Params((("a", "1"),)))
    for step in range(30):
        queue.put(point(step))
    queue.put(Tags((("t", "x"),)))
    queue.flush()
    assert server.threads == {"mlflow-delivery"}
    steps = [item[3] for w in server.received if isinstance(w, Metrics) for item in w.items]
    assert steps == list(range(30))
    assert isinstance(server.received[0], Params) and isinstance(server.received[-1], Tags)
    assert server.calls < 32  # the points went in fewer calls than writes


def test_an_outage_keeps_every_write_in_order_and_delivers_them_when_the_server_is_back():
    server = FakeServer()
    queue = delivery(server)
    server.down = True
    for step in range(10):
        queue.put(point(step))
    queue.flush()  # returns during the outage: the writes stay kept
    assert queue.outage and server.received == [] and len(queue.pending) == 10
    server.down = False
    left = queue.close(outage_wait=5.0)
    assert left == [] and not queue.outage
    assert [item[3] for w in server.received for item in w.items] == list(range(10))


def test_a_server_that_stays_away_leaves_the_writes_to_the_caller_after_the_wait():
    server = FakeServer()
    queue = delivery(server)
    server.down = True
    queue.put(point(0))
    queue.put(Terminate("FINISHED"), check=False)
    left = queue.close(outage_wait=0.2)
    assert [type(w) for w in left] == [Metrics, Terminate] and server.received == []


def test_a_refused_write_is_raised_at_flush_and_the_writes_after_it_still_go():
    server = FakeServer()
    server.refuse = True
    queue = delivery(server)
    queue.put(Params((("a", "2"),)))
    with pytest.raises(ValueError, match="changing param"):
        queue.flush()
    queue.put(point(0))
    assert queue.close(outage_wait=1.0) == [] and server.received == [point(0)]


def test_metric_points_join_up_to_mlflows_limit_and_never_past_another_write():
    queue = [point(0), point(1), Tags((("a", "b"),)), point(2)]
    joined, taken = coalesced(queue)
    assert taken == 2 and [item[3] for item in joined.items] == [0, 1]
    assert coalesced(queue[2:]) == (queue[2], 1)
    big = [Metrics(tuple(("m", 1.0, 0, i) for i in range(400)))] * 3
    joined, taken = coalesced(big)
    assert taken == 2 and len(joined.items) <= METRIC_BATCH


def test_the_spool_keeps_typed_writes_as_json_lines_and_delivers_them_in_order(tmp_path):
    """The line layout is the one earlier launches wrote (run_id, kind, payload), so their spools still deliver."""
    spool = Spool.in_run_dir(tmp_path)
    writes = [Params((("a", "1"),)), point(3), Terminate("KILLED")]
    spool.keep("run1", writes)
    assert [from_line(to_line("run1", w)) for w in writes] == [("run1", w) for w in writes]
    assert '"kind": "metrics", "payload": {"items": [["step/loss"' in spool.path.read_text()

    applied = []

    class Client:
        def log_batch(self, run_id, **kw):
            applied.append((run_id, sorted(kw)))
            if len(applied) == 2 and not getattr(self, "second_try", False):
                self.second_try = True
                raise ConnectionError("Connection refused")

        def set_terminated(self, run_id, status):
            applied.append((run_id, status))

    client = Client()
    with pytest.raises(ConnectionError):
        spool.deliver(client)  # the first write delivered, then the server went away
    assert len(spool.path.read_text().splitlines()) == 2  # what was delivered is gone, the rest kept
    assert spool.deliver(client) == 2 and not spool.path.exists()
    assert applied[-1] == ("run1", "KILLED")


def test_a_file_still_being_written_is_sent_as_it_was_when_its_turn_came(tmp_path):
    """The console is sent while the launch still prints: the file sent must not grow under requests (which reads
    its length first and then sends it to its end; the extra bytes broke the next request on the connection)."""
    live = tmp_path / "console.log"
    live.write_text("before\n")
    sent = []

    class Client:
        def log_artifact(self, run_id, path, artifact_path):
            with live.open("a") as console:
                console.write("printed during the upload\n")
            sent.append((Path(path).name, Path(path).read_text(), artifact_path))

    Artifact(str(live), None).apply(Client(), "run1")
    assert sent == [("console.log", "before\n", None)]
    assert live.read_text() == "before\nprinted during the upload\n"
