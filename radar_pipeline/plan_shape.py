"""The shape of a plan and the difference between two: what EXPLAIN (FORMAT JSON) says, without costs or estimates.

A plan's shape is its tree of nodes with what identifies each: the node type, the relation and index it touches, the
join type, the aggregate strategy, the scan direction, the subplan or CTE it belongs to. Costs, row estimates and
widths are left out, so re-planning the same way after new statistics keeps the same shape; a different index, a scan
that turned sequential, a join that changed method or order gives another.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

SHAPE_KEYS = (
    "Node Type",
    "Parent Relationship",
    "Join Type",
    "Strategy",
    "Partial Mode",
    "Scan Direction",
    "Relation Name",
    "Schema",
    "Index Name",
    "CTE Name",
    "Subplan Name",
    "Function Name",
)


def root(plan: Any) -> dict[str, Any]:
    """The top node of an EXPLAIN (FORMAT JSON) result, or of a plan tree given directly."""
    if isinstance(plan, str):
        plan = json.loads(plan)
    if isinstance(plan, list):
        plan = plan[0]
    if isinstance(plan, dict) and "Plan" in plan:
        plan = plan["Plan"]
    if not isinstance(plan, dict) or "Node Type" not in plan:
        raise ValueError("not an EXPLAIN (FORMAT JSON) plan")
    return plan


def shape(plan: Any) -> dict[str, Any]:
    """The plan tree reduced to its identifying fields (see the module docstring)."""
    node = root(plan)
    out: dict[str, Any] = {k: node[k] for k in SHAPE_KEYS if k in node}
    children = node.get("Plans") or []
    if children:
        out["Plans"] = [shape(child) for child in children]
    return out


def plan_hash(plan: Any) -> str:
    """A stable 16-hex-digit hash of the plan's shape."""
    canonical = json.dumps(shape(plan), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def describe(node: dict[str, Any]) -> str:
    """One node in words, as EXPLAIN's text format names it: "Index Scan using orders_idx on orders"."""
    text = node.get("Node Type", "?")
    if node.get("Strategy") and node["Node Type"] == "Aggregate":
        text = f"{node['Strategy']} {text}".replace("Hashed Aggregate", "HashAggregate")
    if node.get("Join Type") and node["Node Type"] in ("Hash Join", "Merge Join", "Nested Loop"):
        text += f" ({node['Join Type']})"
    if node.get("Index Name"):
        text += f" using {node['Index Name']}"
    if node.get("Relation Name"):
        text += f" on {node['Relation Name']}"
    elif node.get("CTE Name"):
        text += f" on {node['CTE Name']}"
    elif node.get("Function Name"):
        text += f" on {node['Function Name']}"
    return text


def total_cost(plan: Any) -> float | None:
    """The planner's estimated total cost of the whole plan."""
    value = root(plan).get("Total Cost")
    return float(value) if value is not None else None


def nodes(plan: Any) -> Iterator[dict[str, Any]]:
    """Every node of the tree, depth first."""
    stack = [root(plan)]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.get("Plans") or []))


def diff(
    before: Any, after: Any, before_source: str = "generic_plan", after_source: str = "generic_plan"
) -> dict[str, Any]:
    """What changed from one plan to the other, for a person: the root, nodes removed and added, the cost, cautions.

    `changes` pairs a removed scan with an added scan of the same relation ("Index Scan using orders_customer_idx on
    orders → Seq Scan on orders"), the most common way a regression shows in a plan.
    """
    old = Counter(describe(n) for n in nodes(before))
    new = Counter(describe(n) for n in nodes(after))
    removed = sorted((old - new).elements())
    added = sorted((new - old).elements())
    changes = []
    for gone in list(removed):
        relation = gone.rsplit(" on ", 1)[1] if " on " in gone else None
        match = next((a for a in added if relation and a.endswith(f" on {relation}")), None)
        if match is not None:
            changes.append(f"{gone} → {match}")
    cost_before, cost_after = total_cost(before), total_cost(after)
    cautions = []
    if "generic_plan" in (before_source, after_source):
        cautions.append(
            "at least one side is an EXPLAIN GENERIC_PLAN estimate made without the real parameter values, not the "
            "plan that ran: confirm with EXPLAIN ANALYZE on a real call"
        )
    return {
        "shape_changed": plan_hash(before) != plan_hash(after),
        "root_before": describe(root(before)),
        "root_after": describe(root(after)),
        "root_changed": describe(root(before)) != describe(root(after)),
        "removed": removed,
        "added": added,
        "changes": changes,
        "cost_before": cost_before,
        "cost_after": cost_after,
        "cost_factor": (cost_after / cost_before) if cost_before and cost_after is not None else None,
        "source_before": before_source,
        "source_after": after_source,
        "cautions": cautions,
    }


def summary(plan_diff: dict[str, Any]) -> str:
    """The diff in one line: the scan changes, else the root change, with the cost factor, and the caution of a
    queryid not checked for sharing (steps.plan_diffs)."""
    if plan_diff.get("unavailable"):
        return f"no plan diff: {plan_diff['unavailable']}"
    if not plan_diff["shape_changed"]:
        text = "plan unchanged"
    else:
        text = "; ".join(plan_diff["changes"] or [f"{plan_diff['root_before']} → {plan_diff['root_after']}"])
        if plan_diff.get("cost_factor"):
            text += f" (estimated cost ×{plan_diff['cost_factor']:.1f})"
    if plan_diff.get("queryid_not_checked"):
        text += f"; caution: {plan_diff['queryid_not_checked']}"
    return text


# pg_hint_plan's words for the scan and join methods it can pin (https://pg-hint-plan.readthedocs.io, "Hint list").
SCAN_HINTS = {
    "Seq Scan": "SeqScan",
    "Index Scan": "IndexScan",
    "Index Only Scan": "IndexOnlyScan",
    "Bitmap Heap Scan": "BitmapScan",
    "Tid Scan": "TidScan",
}
JOIN_HINTS = {"Nested Loop": "NestLoop", "Hash Join": "HashJoin", "Merge Join": "MergeJoin"}


def pin_hint(plan: Any) -> str | None:
    """pg_hint_plan's comment that asks for this plan's scans (method and index per relation), its join methods and
    its join order (Leading), e.g. "/*+ IndexScan(o orders_customer_idx) HashJoin(c o) Leading((o c)) */"; relations
    by the alias the plan names them with, as the hints want. None for a plan with no relation scanned."""
    node = root(plan)
    hints: list[str] = []
    for n in nodes(node):
        method = SCAN_HINTS.get(n.get("Node Type", ""))
        alias = n.get("Alias") or n.get("Relation Name")
        if method and alias:
            index = n.get("Index Name") or next(
                (c.get("Index Name") for c in n.get("Plans") or [] if c.get("Node Type") == "Bitmap Index Scan"), None
            )
            hints.append(f"{method}({_hint_name(alias)}{' ' + _hint_name(index) if index else ''})")
        join = JOIN_HINTS.get(n.get("Node Type", ""))
        if join:
            hints.append(f"{join}({' '.join(sorted(_hint_name(a) for a in _aliases(n)))})")
    if not hints:
        return None
    order = _leading(node)
    if any(JOIN_HINTS.get(n.get("Node Type", "")) for n in nodes(node)) and order:
        hints.append(f"Leading({order})")
    return "/*+ " + " ".join(hints) + " */"


def _aliases(node: dict[str, Any]) -> list[str]:
    return [a for n in nodes(node) if SCAN_HINTS.get(n.get("Node Type", "")) and (a := n.get("Alias"))]


def _leading(node: dict[str, Any]) -> str | None:
    """The join order under a node as Leading's nested pairs: "((a b) c)"."""
    if SCAN_HINTS.get(node.get("Node Type", "")):
        alias = node.get("Alias") or node.get("Relation Name")
        return _hint_name(alias) if alias else None
    children = [c for c in node.get("Plans") or [] if c.get("Parent Relationship") not in ("InitPlan", "SubPlan")]
    if JOIN_HINTS.get(node.get("Node Type", "")) and len(children) == 2:
        outer, inner = _leading(children[0]), _leading(children[1])
        return f"({outer} {inner})" if outer and inner else None
    return _leading(children[0]) if len(children) == 1 else None


def _hint_name(name: str) -> str:
    """A name as pg_hint_plan reads it: double-quoted when it is not a plain lower-case identifier."""
    return name if name.replace("_", "a").isalnum() and name == name.lower() else '"' + name.replace('"', '""') + '"'
