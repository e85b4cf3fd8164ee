"""How a requester and a forkserver talk: one Unix socket, each message length-prefixed JSON with the
descriptors it hands over (a child's stdin, stdout and stderr), so neither side needs more than the socket."""

from __future__ import annotations

import json
import socket
import struct

SOCKET_ENV = "LAUNCHER_FORKSERVER"  # a running server's socket (inherited by children), or "off"


def send(sock: socket.socket, message: dict, fds: list[int] | tuple = ()) -> None:
    data = json.dumps(message).encode()
    socket.send_fds(sock, [struct.pack("!I", len(data)) + data], list(fds))


def receive(sock: socket.socket, max_fds: int = 0) -> tuple[dict | None, list[int]]:
    header, fds, _, _ = socket.recv_fds(sock, 4, max_fds)
    if len(header) < 4:
        return None, fds
    (size,) = struct.unpack("!I", header)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            return None, fds
        data += chunk
    return json.loads(data), fds
