"""A local OpenAI-compatible judge stub on 127.0.0.1 (loopback only), bounded and self-stopping.

from judge_stub import Endpoint, endpoint   # endpoint: a pytest fixture yielding the base URL
Endpoint.replies = [("status", 503), ("rating", "Rating: [[6]]")]
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Endpoint(BaseHTTPRequestHandler):
    """An OpenAI-compatible stub on 127.0.0.1. Each request pops one reply:
    ("rating", text) | ("garbage", body) | ("status", code) | ("hang", seconds) | ("trickle", seconds)."""

    replies: list = []
    requests: list = []
    stop = threading.Event()  # set at teardown: hanging and trickling handlers return at once

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append((self.path, self.headers.get("Authorization"), body))
        kind, value = type(self).replies.pop(0) if type(self).replies else ("status", 500)
        if kind == "hang":  # accept the request, never answer (bounded)
            type(self).stop.wait(value)
            return
        if kind == "status":
            self._send(value, json.dumps({"error": {"message": f"stub status {value}"}}).encode())
            return
        if kind == "garbage":
            self._send(200, value.encode(), "text/html")
            return
        payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": value}}]}).encode()
        if kind == "trickle":  # headers at once, then one byte every 50 ms for `value` seconds (bounded)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(10**6))
            self.end_headers()
            deadline = time.monotonic() + value
            while time.monotonic() < deadline and not type(self).stop.is_set():
                try:
                    self.wfile.write(b" ")
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.05)
            return
        self._send(200, payload)

    def _send(self, status, payload, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def endpoint():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    Endpoint.replies, Endpoint.requests = [], []
    Endpoint.stop.clear()
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    Endpoint.stop.set()
    server.shutdown()
    server.server_close()
