"""The demo's two small HTTP servers, threads of the demo process: the webhook receiver
Alertmanager notifies (it prints each alert with its runbook link) and the static server
of the generated runbook site (where every alert's `runbook_url` points)."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["alert_lines", "runbook_site", "webhook_receiver"]

WEBHOOK_PATH = "/alerts"


def alert_lines(alert: dict[str, Any]) -> list[str]:
    """One alert of an Alertmanager notification, as the demo prints it."""
    labels = alert.get("labels", {})
    annotations = alert.get("annotations", {})
    where = " ".join(f"{key}={labels[key]}" for key in ("agent_type", "node") if key in labels)
    head = f"ALERT {alert.get('status', '?').upper()} {labels.get('alertname', '?')} {where}"
    return [
        f"{head.rstrip()} (severity={labels.get('severity', '?')})",
        f"    {annotations.get('summary', '')}",
        f"    runbook: {annotations.get('runbook_url', '<none>')}",
    ]


def _serve(server: ThreadingHTTPServer) -> Iterator[str]:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _bind(handler: Callable[..., BaseHTTPRequestHandler], port: int) -> ThreadingHTTPServer:
    """Listen on `port` if free, else on any free port."""
    try:
        return ThreadingHTTPServer(("127.0.0.1", port), handler)
    except OSError:
        return ThreadingHTTPServer(("127.0.0.1", 0), handler)


@contextmanager
def webhook_receiver(port: int, on_alert: Callable[[dict[str, Any]], None]) -> Iterator[str]:
    """Serve Alertmanager's webhook; yields the URL to configure. Each alert is printed
    once per status (Alertmanager repeats a group's alerts), then given to `on_alert`."""
    seen: set[tuple[str, str]] = set()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.end_headers()
            for alert in json.loads(body).get("alerts", []):
                key = (str(alert.get("fingerprint")), str(alert.get("status")))
                with lock:
                    if key in seen:
                        continue
                    seen.add(key)
                    print("\n".join(alert_lines(alert)), flush=True)
                on_alert(alert)

        def log_message(self, *args: Any) -> None:
            pass  # the alerts are the output; access lines would bury them

    with contextmanager(_serve)(_bind(Handler, port)) as base_url:
        yield base_url + WEBHOOK_PATH


@contextmanager
def runbook_site(directory: Path, port: int) -> Iterator[str]:
    """Serve the generated runbook folder (`runbooks/html/`); yields its base URL."""

    class Handler(SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    handler = functools.partial(Handler, directory=str(directory))
    with contextmanager(_serve)(_bind(handler, port)) as base_url:
        yield base_url + "/"
