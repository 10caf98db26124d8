"""A local HTTP server for the registry client's unit tests (no registry): a quiet handler base
that answers JSON, and a server on a free port in a daemon thread."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any


class JsonHandler(http.server.BaseHTTPRequestHandler):
    """A request handler that logs nothing and answers with :meth:`send_json`."""

    def send_json(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def serve(handler: type[http.server.BaseHTTPRequestHandler]) -> tuple[Any, str]:
    """A server of ``handler`` on 127.0.0.1 (a free port), running, and its URL. Stop it with
    ``shutdown()`` and ``server_close()``."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"
