"""A webhook's cost per message: the default payload, and a template rendered in its capped child process.

Run with `make bench-webhook` (or `.venv/bin/python benchmarks/webhook_render_bench.py [--messages N]`; default 50).
For N messages of one regression each (the documented example template, alerts/webhook.py's fields), it measures
the wall-clock time and the CPU (user + system, this process and its children) of:

1. the default payload: `payload()` and its JSON encoding, in this process;
2. a template rendered in-process in the same sandbox, without caps (what the child itself does, for reference);
3. a template through `render_body`: a child process started (`python -I`, Jinja2 imported, the template compiled),
   capped, rendered, its answer checked, per message;
4. the check when the definitions load (`validate`: one child rendering the three samples), per templated webhook.

It prints each figure per message (the median of N) and the machine's cores and load average before and after. No
network and no database: the request itself is not sent (its cost is the HTTP client's, the same for both bodies).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from radar_pipeline.alerts import webhook, webhook_render  # noqa: E402
from radar_pipeline.alerts.channel import Detection  # noqa: E402
from radar_pipeline.alerts.render import AnalysisFacts, Regression  # noqa: E402

TEMPLATE = """{
  "text": "radar: {{ summary }}",
  "severity": "{% if regression and regression.change_factor >= 3 %}critical{% else %}warning{% endif %}",
  "details": {
    "target": {{ target|tojson }},
    "deploy": {{ deploy_id|tojson }},
    "service": {{ service|tojson }},
    "statement": {{ query|tojson }},
    "queryid": {{ statement.queryid }},
    "factor": {% if regression %}{{ regression.change_factor }}{% else %}null{% endif %},
    "links": {"deploy": {{ deploy_url|tojson }}, "run": {{ run_url|tojson }}}
  }
}"""


def cpu() -> float:
    """CPU seconds of this process and its reaped children so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(work: Callable[[], object], n: int) -> tuple[float, float]:
    """Median wall-clock seconds and median CPU seconds of `work`, run n times."""
    walls, cpus = [], []
    for _ in range(n):
        wall, used = time.perf_counter(), cpu()
        work()
        cpus.append(cpu() - used)
        walls.append(time.perf_counter() - wall)
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    """Measure and print the four figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50)
    n = parser.parse_args().messages
    at = datetime(2026, 11, 29, 12, tzinfo=UTC)
    facts = AnalysisFacts("shop-v2", "main", at, "shop", "v2", "https://ci.example/1", "https://dagster.example/1")
    found = Detection(
        (5, 10, 1001, True),
        regression=Regression(
            1001, "SELECT * FROM orders WHERE customer_id = $1", 1.5, 6.0, 4.0, 0.999, at + timedelta(seconds=30),
            1200, 1300, "plan_changed", "Index Scan → Seq Scan", factor_low=3.5, factor_high=4.5,
        ),
    )  # fmt: skip
    body = webhook.payload(facts, found, "bench-1", "webhook:ops")
    given = webhook.fields(body)
    sandboxed = webhook_render._environment().from_string(TEMPLATE)
    hosts = ["hooks.example.com"]
    print(f"cores {os.cpu_count()}, load average before {os.getloadavg()[0]:.2f}; {n} messages")
    figures = {
        "default payload (in-process)": lambda: json.dumps(
            webhook.payload(facts, found, "bench-1", "webhook:ops"), ensure_ascii=False
        ),
        "template, in-process sandbox, no caps": lambda: "".join(sandboxed.generate(given)),
        "template, capped child process": lambda: webhook.render_body(TEMPLATE, given, "webhook:ops"),
        "validate at load (3 samples, 1 child)": lambda: webhook.validate(
            "https://hooks.example.com/x", TEMPLATE, hosts
        ),
    }
    for name, work in figures.items():
        wall, used = measure(work, n)
        print(f"{name:40} {wall * 1000:9.3f} ms wall {used * 1000:9.3f} ms CPU (median)")
    print(f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
