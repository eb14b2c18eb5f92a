"""`paymanager call`: an event stream is printed as it arrives; a refused connection is one line."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.support.processes import free_port


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PAYMANAGER_SERVICE_ID": "svc_x", "PAYMANAGER_SERVICE_SECRET": "sk_x"}


def test_a_refused_connection_is_one_line_and_exit_1() -> None:
    port = free_port()
    result = subprocess.run(
        [sys.executable, "-m", "paymanager", "call", "GET", "/intents", "--url", f"http://127.0.0.1:{port}"],
        env=_env(), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [
        f"error: cannot connect to http://127.0.0.1:{port}: [Errno 111] Connection refused "
        "(is `paymanager run` with the api role up?)"
    ]


def test_an_event_stream_is_printed_as_it_arrives() -> None:
    first_read = threading.Event()

    class Events(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"event: intent.settled\ndata: {}\n\n")
            self.wfile.flush()
            # The stream stays open until the CLI has printed the first event.
            first_read.wait(timeout=60)

        def log_message(self, *_: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Events)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        process = subprocess.Popen(
            [sys.executable, "-m", "paymanager", "call", "GET", "/intents/x/events", "--url", url],
            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert process.stdout is not None
        assert process.stdout.readline() == "event: intent.settled\n"
        assert process.poll() is None  # still streaming
        first_read.set()
        assert process.wait(timeout=60) == 0
    finally:
        server.shutdown()
