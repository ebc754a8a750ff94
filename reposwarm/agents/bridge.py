"""The sandboxed agent's only way out: a bridge from a loopback port inside its network namespace to the model
API outside, through a unix socket.

bwrap --unshare-net gives the agent a network namespace with nothing but its own loopback: no route anywhere,
not even to the host's loopback where the model proxy listens. A unix socket crosses that boundary as a file:
the worker listens on one (`HostBridge`, forwarding each connection to the proxy's TCP port) and binds it into
the sandbox; there `INSIDE` (run by the worker's Python, first in the sandbox) listens on 127.0.0.1 at the
proxy's own port and forwards each connection to the socket, then runs the agent. The agent's base URL is
unchanged, and it can reach that one address and nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

# Inside the sandbox: python -I -S -c INSIDE <socket> <port> <agent argv...>. The agent's exit status is its own.
INSIDE = r"""
import socket, subprocess, sys, threading
sock_path, port, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def pump(a, b):
    try:
        while True:
            data = a.recv(65536)
            if not data:
                break
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
def serve(listener):
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(sock_path)
        except OSError:
            client.close()
            continue
        threading.Thread(target=pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pump, args=(upstream, client), daemon=True).start()
listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", port))
listener.listen(64)
threading.Thread(target=serve, args=(listener,), daemon=True).start()
try:
    sys.exit(subprocess.call(argv))
except FileNotFoundError:
    print("[reposwarm: agent not found: " + argv[0] + "]", file=sys.stderr, flush=True)
    sys.exit(127)
"""


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


class HostBridge:
    """A unix socket in the worker forwarding each connection to host:port (the model proxy), for the sandbox."""

    def __init__(self, path: Path, host: str, port: int) -> None:
        self.path, self.host, self.port = path, host, port
        self.connections = 0
        self._server: asyncio.AbstractServer | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))

    async def __aenter__(self) -> HostBridge:
        self._server = await asyncio.start_unix_server(self._handle, path=str(self.path))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
        with contextlib.suppress(OSError):
            self.path.unlink()
