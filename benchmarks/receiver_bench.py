"""`radar webhook serve` under a burst: deploy events per second held on one core, none lost or doubled.

Run with `make bench-receiver` (or `.venv/bin/python benchmarks/receiver_bench.py [--seconds S] [--connections C]`;
defaults 60 s, 32 connections). It starts an embedded PostgreSQL 18 as the warehouse (fsync off, as every benchmark
here), migrates it, and starts the receiver as a user would (`radar webhook serve`, the console script: one uvicorn
worker) pinned to one core with taskset; the load generator (this process, asyncio, raw HTTP/1.1 with keep-alive) is
pinned to the other core, the warehouse is not pinned.

For S seconds, C connections each post events back to back, in turn:
- a GitHub deployment_status delivery (HMAC-SHA256 signed, a new X-GitHub-Delivery, a body of about 6 KB as GitHub's
  are): a new deploy, stored with its delivery id;
- a generic JSON deploy with a bearer token: a new deploy;
- every 20th request, a replay of an earlier GitHub delivery or a repeat of an earlier generic deploy (each already
  recorded, 200): neither may add a row.

With `--rate R`, the requests are paced at R per second instead (the latency at that load, not at saturation).

Afterwards it counts the rows of radar.deploy_event and radar.webhook_delivery: each must equal the number of 201
answers (none lost, none doubled), and every answer must be 201, 200 or 409. It prints events per second (201s over
the run), the latency's p50 and p99 (from the request's first byte to the answer's last), the receiver's peak RSS
(VmHWM), and the machine's cores and load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from radar_pipeline.demo.local_postgres import LocalPostgres, free_port  # noqa: E402
from radar_pipeline.warehouse import migrations  # noqa: E402
from radar_pipeline.warehouse.database import make_engine  # noqa: E402

RADAR = Path(sys.executable).parent / "radar"
TARGET = "main"
SECRET = "bench-github-secret"
TOKEN = "bench-deploy-token-0123456789"
SHA = "279484c09fbe69ededfced8c1bb6e6d24616b468"
REPEAT_EVERY = 20
TARGET_RATE = 200.0


class Load:
    """What the connections sent and got."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self.sent_github: list[tuple[bytes, str]] = []
        self.sent_generic: list[bytes] = []
        self.n = 0

    def next_request(self, port: int) -> bytes:
        """The next request: a new GitHub delivery, a new generic deploy, or a repeat of an earlier one."""
        self.n += 1
        at = (datetime.now(UTC) - timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ")
        if self.n % REPEAT_EVERY == 0 and self.sent_github and self.sent_generic:
            if self.n % (2 * REPEAT_EVERY) == 0:
                body, delivery = self.sent_github[self.n % len(self.sent_github)]
                return _github_request(port, body, delivery)
            return _generic_request(port, self.sent_generic[self.n % len(self.sent_generic)])
        if self.n % 2:
            deployment = self.n
            body = json.dumps(_github_payload(deployment, at)).encode()
            delivery = str(uuid.uuid4())
            self.sent_github.append((body, delivery))
            return _github_request(port, body, delivery)
        fields = {"deploy_id": f"bench-{self.n}", "target": TARGET, "deployed_at": at, "service": "shop",
                  "version": f"{self.n:012x}", "url": f"https://ci.example/runs/{self.n}"}  # fmt: skip
        body = json.dumps(fields).encode()
        self.sent_generic.append(body)
        return _generic_request(port, body)


def _github_payload(deployment: int, at: str) -> dict:
    return {
        "action": "created",
        "deployment_status": {"id": deployment, "state": "success", "created_at": at,
                              "log_url": f"https://github.com/acme/shop/actions/runs/{deployment}"},
        "deployment": {"id": deployment, "sha": SHA, "ref": "main", "environment": "production"},
        "repository": {"full_name": "acme/shop", "url": "https://api.github.com/repos/acme/shop",
                       "description": "x" * 5000},
        "sender": {"login": "octocat"},
    }  # fmt: skip


def _github_request(port: int, body: bytes, delivery: str) -> bytes:
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    head = (
        f"POST /v1/deploys/github?target={TARGET} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nX-GitHub-Event: deployment_status\r\n"
        f"X-GitHub-Delivery: {delivery}\r\nX-Hub-Signature-256: {signature}\r\n\r\n"
    )
    return head.encode() + body


def _generic_request(port: int, body: bytes) -> bytes:
    head = (
        f"POST /v1/deploys/generic HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    )
    return head.encode() + body


async def _connection(port: int, load: Load, until: float, rate: float | None, start: float) -> None:
    """One keep-alive connection posting back to back until `until` (or, at `rate`, each request when it is due)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    while time.monotonic() < until:
        if rate is not None:
            due = start + load.n / rate
            if due >= until:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
        request = load.next_request(port)
        started = time.perf_counter()
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = next(
            int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        load.latencies.append(time.perf_counter() - started)
        load.statuses[status] = load.statuses.get(status, 0) + 1
        if b"connection: close" in head.lower():
            writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.close()


async def _run(port: int, connections: int, seconds: float, load: Load, rate: float | None) -> float:
    started = time.monotonic()
    await asyncio.gather(*(_connection(port, load, started + seconds, rate, started) for _ in range(connections)))
    return time.monotonic() - started


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rate", type=float, help="requests per second, paced (default: back to back)")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    print(f"cores: {cores}, load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    root = Path(tempfile.mkdtemp(prefix="radar-receiver-bench-"))
    server = LocalPostgres(root / "warehouse").start()
    receiver = None
    try:
        url = server.url(driver="postgresql+psycopg")
        migrations.upgrade(url)
        port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RADAR_")}
        env.update({
            "RADAR_TARGETS": f"{TARGET}=postgresql://nowhere.invalid/none",
            "RADAR_RECEIVER_GITHUB_SECRET": SECRET,
            "RADAR_RECEIVER_TOKENS": json.dumps([{"token": TOKEN, "scopes": ["deploy"]}]),
        })  # fmt: skip
        pin = ["taskset", "-c", "0"] if shutil.which("taskset") and cores > 1 else []
        receiver = subprocess.Popen(
            [*pin, str(RADAR), "webhook", "serve", "--port", str(port), "--warehouse", url],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or receiver.poll() is not None:
                raise SystemExit("the receiver did not come up")
            time.sleep(0.1)
        if pin:
            os.sched_setaffinity(0, {1})
        print(f"receiver: one uvicorn worker{' on core 0 (taskset)' if pin else ''}; load generator"
              f"{' on core 1' if pin else ''}; {args.connections} connections for {args.seconds:.0f} s"
              + (f", paced at {args.rate:.0f} requests/s" if args.rate else ", back to back"))  # fmt: skip
        load = Load()
        elapsed = asyncio.run(_run(port, args.connections, args.seconds, load, args.rate))
        peak = _peak_rss_mb(receiver.pid)
        engine = make_engine(url)
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT count(*) FROM radar.deploy_event")).scalar_one()
            deliveries = conn.execute(sa.text("SELECT count(*) FROM radar.webhook_delivery")).scalar_one()
        engine.dispose()
        created = load.statuses.get(201, 0)
        answers = sum(load.statuses.values())
        ordered = sorted(load.latencies)
        p50, p99 = statistics.median(ordered), ordered[int(0.99 * (len(ordered) - 1))]
        print(f"answers: {answers} in {elapsed:.1f} s, by status: {dict(sorted(load.statuses.items()))}")
        print(f"rows: {rows} deploy events, {deliveries} delivery ids; 201 answers: {created}")
        lost_or_doubled = rows != created or set(load.statuses) - {200, 201, 409}
        print(f"none lost or doubled: {'yes' if not lost_or_doubled else 'NO'}")
        rate = created / elapsed
        print(f"events/s held: {rate:.0f} new deploys ({answers / elapsed:.0f} requests/s); latency p50 "
              f"{p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms; receiver peak RSS {peak:.0f} MB")  # fmt: skip
        if args.rate is None:  # paced, the rate is the one asked for
            print(f"target >= {TARGET_RATE:.0f} events/s: {'met' if rate >= TARGET_RATE else 'NOT met'}")
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        if lost_or_doubled:
            raise SystemExit(1)
    finally:
        if receiver is not None and receiver.poll() is None:
            os.kill(receiver.pid, 15)
            receiver.wait(timeout=30)
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
