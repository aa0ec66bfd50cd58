"""A real Alertmanager (Debian `prometheus-alertmanager`) and a local webhook receiver.

    with WebhookReceiver() as hook, AlertmanagerServer(hook.url) as am:
        # point Prometheus at am.address ...
        [alert] = hook.wait_for(lambda a: a["labels"]["alertname"] == "QueueDepthHigh")

Alertmanager runs on a free port with clustering off (it would otherwise bind 9094),
groups nothing away (`group_wait: 0s`) and posts every notification to the receiver.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.ready_process import start_until_ready
from tests.support.redis_server import find_free_port

__all__ = ["AlertmanagerError", "AlertmanagerServer", "WebhookReceiver", "alertmanager_config"]

BINARY = "prometheus-alertmanager"


class AlertmanagerError(RuntimeError):
    """Alertmanager did not start or its config was refused."""


def alertmanager_config(webhook_url: str) -> dict[str, Any]:
    """Route every alert at once to one webhook; group per alert and agent type."""
    return {
        "route": {
            "receiver": "webhook",
            "group_by": ["alertname", "agent_type", "instance"],
            "group_wait": "0s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {"name": "webhook", "webhook_configs": [{"url": webhook_url, "send_resolved": False}]}
        ],
    }


class WebhookReceiver:
    """An HTTP server on a free port that keeps every alert Alertmanager posts to it."""

    def __init__(self) -> None:
        self.port = find_free_port()
        self.alerts: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                notification = json.loads(body)
                with receiver._lock:
                    receiver.alerts.extend(notification.get("alerts", []))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass  # keep test output clean

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def received(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.alerts)

    def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], timeout: float = 60.0
    ) -> list[dict[str, Any]]:
        """Poll until some received alert satisfies `predicate`; return those that do."""
        deadline = time.monotonic() + timeout
        while True:
            matching = [alert for alert in self.received() if predicate(alert)]
            if matching:
                return matching
            if time.monotonic() >= deadline:
                names = sorted({a["labels"].get("alertname", "?") for a in self.received()})
                raise AssertionError(f"no matching alert within {timeout}s; got {names}")
            time.sleep(0.02)

    def __enter__(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


class AlertmanagerServer:
    """`prometheus-alertmanager` delivering to `webhook_url`, in a temp dir, on a free port."""

    def __init__(self, webhook_url: str) -> None:
        self.port = find_free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="pcj-alertmanager-"))
        self.config_path = self.directory / "alertmanager.yml"
        self.config_path.write_text(yaml.safe_dump(alertmanager_config(webhook_url)))
        self._log_path = self.directory / "alertmanager.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        """host:port, as Prometheus' alerting config wants it."""
        return f"127.0.0.1:{self.port}"

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self._log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "<no log>"

    def check_config(self) -> subprocess.CompletedProcess[str]:
        amtool = shutil.which("amtool")
        if amtool is None:
            raise AlertmanagerError(
                "amtool is not installed: `apt-get install prometheus-alertmanager`"
            )
        return subprocess.run(
            [amtool, "check-config", str(self.config_path)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )

    def start(self, timeout: float = 30.0) -> AlertmanagerServer:
        binary = shutil.which(BINARY)
        if binary is None:
            raise AlertmanagerError(f"{BINARY} is not installed: `apt-get install {BINARY}`")
        args = [
            binary,
            f"--config.file={self.config_path}",
            f"--storage.path={self.directory / 'data'}",
            f"--web.listen-address={self.address}",
            "--cluster.listen-address=",  # no gossip port: one instance, nothing else bound
            "--log.level=warn",
        ]
        self.process = start_until_ready(
            args,
            self._log_path,
            f"http://{self.address}/-/ready",
            name="alertmanager",
            error=AlertmanagerError,
            timeout=timeout,
        )
        return self

    def alerts(self) -> list[dict[str, Any]]:
        response = httpx.get(f"http://{self.address}/api/v2/alerts", timeout=5)
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()
        return result

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> AlertmanagerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
