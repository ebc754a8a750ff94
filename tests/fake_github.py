"""A fake GitHub REST API on loopback: POST /repos/{owner}/{repo}/pulls, as GitHub answers it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeGitHub:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
                server.requests.append({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                                        "body": body})
                owner_repo = self.path.removeprefix("/repos/").removesuffix("/pulls")
                if self.headers.get("authorization") != f"Bearer {server.token}":
                    return self._send(401, {"message": "Bad credentials", "status": "401"})
                number = len(server.requests)
                self._send(201, {"id": 1000 + number, "number": number, "state": "open", "title": body["title"],
                                 "html_url": f"https://github.com/{owner_repo}/pull/{number}",
                                 "head": {"ref": body["head"]}, "base": {"ref": body["base"]}, "draft": body["draft"]})

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json; charset=utf-8")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.token = "ghp_" + "f" * 36
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
