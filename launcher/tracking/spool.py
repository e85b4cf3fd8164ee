"""What an outage left undelivered, kept in the run dir (`tracking_pending.jsonl`) until it can be delivered:
by the next launch in that run dir, or by `python -m launcher.tracking.sync <run dir>`."""

from __future__ import annotations

from pathlib import Path

from launcher.tracking.writes import Write, from_line, to_line

PENDING_FILE = "tracking_pending.jsonl"


class Spool:
    """The run dir's file of undelivered writes, one JSON line each, in order."""

    def __init__(self, path: Path):
        self.path = Path(path)

    @classmethod
    def in_run_dir(cls, run_dir: Path) -> Spool:
        return cls(Path(run_dir) / PENDING_FILE)

    def keep(self, run_id: str, writes: list[Write]) -> None:
        with open(self.path, "a") as handle:
            for write in writes:
                handle.write(to_line(run_id, write) + "\n")

    def deliver(self, client) -> int:
        """Deliver in order; what is delivered is removed, so a second outage loses nothing either."""
        if not self.path.exists():
            return 0
        lines = [line for line in self.path.read_text().splitlines() if line.strip()]
        for index, line in enumerate(lines):
            run_id, write = from_line(line)
            try:
                write.apply(client, run_id)
            except Exception:
                self.path.write_text("".join(rest + "\n" for rest in lines[index:]))
                raise
        self.path.unlink()
        return len(lines)


def deliver_file(client, path: Path) -> int:
    """`Spool(path).deliver(client)`: for `launcher.tracking.sync`."""
    return Spool(path).deliver(client)
