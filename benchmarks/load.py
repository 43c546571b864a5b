"""A load generator for a running server: concurrent clients, each on its own keep-alive
connection, each sending one request at a time until a shared count runs out.

It reports throughput, latency percentiles and errors, and can sample the server's resident
memory as requests complete, to show whether it grows; `local_server` starts a real server
to aim it at. The load test and benchmarks/serve.py use it; so can anyone sizing a
deployment. Standard library only.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any


@dataclass
class LoadResult:
    seconds: float  # from the first request sent to the last answer
    latencies: list[float]  # milliseconds of each successful request
    errors: list[str]  # one line per failed request
    rss: dict[int, int] = field(default_factory=dict)  # requests done -> server RSS, bytes

    @property
    def throughput(self) -> float:
        """Successful requests per second."""
        return len(self.latencies) / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        """The p-th latency percentile in milliseconds (p in 1..99)."""
        if len(self.latencies) < 2:
            return self.latencies[0] if self.latencies else float("nan")
        return statistics.quantiles(self.latencies, n=100, method="inclusive")[int(p) - 1]


def translate_body(sentence: str) -> dict[str, Any]:
    """A greedy single-sentence translate request."""
    return {"sentences": [sentence], "beam_size": 1}


def run_load(
    host: str,
    port: int,
    sentences: Sequence[str],
    *,
    clients: int = 32,
    requests: int = 1_000,
    path: str = "/v1/translate",
    body: Callable[[str], dict[str, Any]] = translate_body,
    server_pid: int | None = None,
    rss_every: int = 100,
    timeout: float = 60.0,
) -> LoadResult:
    """Send `requests` requests (sentences in turn) from `clients` threads and wait for all.

    Args:
        server_pid: a local server process whose RSS to sample (Linux /proc) every
            `rss_every` completed requests and at the end.
        timeout: seconds a single request may take before it counts as an error.
    """
    order = itertools.count()
    done, lock = [0], threading.Lock()
    result = LoadResult(0.0, [], [])

    def client() -> None:
        connection = http.client.HTTPConnection(host, port, timeout=timeout)
        while (n := next(order)) < requests:
            payload = json.dumps(body(sentences[n % len(sentences)]))
            start = time.perf_counter()
            try:
                connection.request("POST", path, payload, {"Content-Type": "application/json"})
                response = connection.getresponse()
                response.read()
                ok, error = response.status == 200, f"HTTP {response.status}"
            except (OSError, http.client.HTTPException) as exc:
                ok, error = False, f"{type(exc).__name__}: {exc}"
                connection.close()
                connection = http.client.HTTPConnection(host, port, timeout=timeout)
            ms = (time.perf_counter() - start) * 1000
            with lock:
                if ok:
                    result.latencies.append(ms)
                else:
                    result.errors.append(error)
                done[0] += 1
                if server_pid is not None and done[0] % rss_every == 0:
                    result.rss[done[0]] = resident_bytes(server_pid)
        connection.close()

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.seconds = time.perf_counter() - start
    if server_pid is not None:
        result.rss[done[0]] = resident_bytes(server_pid)
    return result


def resident_bytes(pid: int) -> int:
    """The resident set size of process `pid` (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise OSError(f"/proc/{pid}/status has no VmRSS line")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def local_server(
    run_dirs: Sequence[str],
    port: int,
    *flags: str,
    start_seconds: float = 120.0,
    python: str = sys.executable,
) -> Iterator[subprocess.Popen]:
    """`alignmt serve RUN_DIRS --port PORT FLAGS` in a subprocess on 127.0.0.1 (run by
    `python`: another environment's, say), once it answers /healthz; stopped (SIGTERM) on
    leaving the block. If it exits at start-up, the error says why, from the end of its
    standard error."""
    with tempfile.TemporaryFile() as stderr:
        command = ["alignmt", "serve", *map(str, run_dirs), "--port", str(port), *flags]
        server = subprocess.Popen(
            [python, "-m", *command], stdout=subprocess.DEVNULL, stderr=stderr
        )
        try:
            _wait_until_up(server, port, start_seconds, stderr)
            yield server
        finally:
            server.terminate()
            server.wait(timeout=30)


def _wait_until_up(server: subprocess.Popen, port: int, seconds: float, stderr: IO[bytes]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            stderr.seek(0)
            said = stderr.read().decode(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(
                f"the server exited at start-up with status {server.returncode}: "
                + " / ".join(said)
            )
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            connection.request("GET", "/healthz")
            if json.loads(connection.getresponse().read())["status"] == "ok":
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"no server answered on port {port} within {seconds} s")
