"""An index for a statement that lost one (issue 39): proposed from the statement's text, tested with hypopg on the
watched server where the database has it (Debian's postgresql-15-hypopg), read-only, in the collector's session."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from radar_pipeline.collector import session
from radar_pipeline.collector.index_advice import check_index, index_sql, proposed_index
from radar_pipeline.config import Target
from radar_pipeline.plan_shape import pin_hint
from radar_pipeline.steps.deploy_analysis import AnalysisRun, analyse_deploy
from radar_pipeline.steps.index_advice import proposal

from .test_catalog_causes import capture_catalog, store_in
from .test_deploy_impact import LIST, SETTINGS

HYPOPG = Path("/usr/share/postgresql/15/extension/hypopg.control")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SELECT count(*) FROM orders WHERE customer_id = $1", ("orders", ["customer_id"])),
        (
            "SELECT id FROM public.orders o WHERE o.created_at > $1 AND o.status = $2",
            ("public.orders", ["status", "created_at"]),
        ),
        (
            "SELECT c.name, o.total FROM customers c JOIN orders o ON o.customer_id = c.id WHERE o.region IN ($1, $2) "
            "AND c.name = $3 AND o.status = $4 AND o.total > $5",
            ("orders", ["region", "status", "total"]),
        ),
        ("SELECT o.total FROM orders o WHERE o.region = $1::text", ("orders", ["region"])),
        ("UPDATE accounts SET balance = balance + $1 WHERE id = $2", ("accounts", ["id"])),
        ("SELECT * FROM orders WHERE customer_id = $1 OR status = $2", None),  # no index serves an OR alone
        ("SELECT * FROM orders", None),
        ("SELECT * FROM a, b WHERE x = $1", None),  # whose column: not known
        ("not sql at all", None),
    ],
)
def test_the_proposal_is_the_table_its_where_compares_most_with_equalities_first(text, expected):
    assert proposed_index(text) == expected


@pytest.mark.parametrize(
    ("text", "scanned", "expected"),
    [
        (  # the join that lost orders_customer_idx in the causes lab: its WHERE is on customers
            "SELECT c.name, o.id, o.total FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.id = $1",
            {"orders"},
            ("orders", ["customer_id"]),
        ),
        (
            "SELECT c.name FROM customers c, public.orders o WHERE c.id = o.customer_id AND o.status = c.segment "
            "AND c.name = $1",
            {"orders"},
            ("public.orders", ["customer_id", "status"]),
        ),
        (  # the scanned table's own comparisons first, even where another table has more
            "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.name = $1 AND c.region = $2 "
            "AND o.status = $3",
            {"orders"},
            ("orders", ["status"]),
        ),
        ("SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.id = $1", {"items"}, None),
        ("SELECT count(*) FROM orders WHERE customer_id = $1", {"orders"}, ("orders", ["customer_id"])),
    ],
)
def test_for_a_table_now_scanned_the_proposal_is_its_own_where_else_the_columns_it_is_joined_on(
    text, scanned, expected
):
    assert proposed_index(text, scanned) == expected


def test_the_proposal_quotes_what_needs_quoting():
    assert index_sql("public.Orders", ["customer id", "status"]) == (
        'CREATE INDEX CONCURRENTLY ON public."Orders" ("customer id", status);'
    )


LOOKUP_SETUP = (
    "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, total int); "
    "INSERT INTO orders SELECT g, g % 1000, g FROM generate_series(1, 100000) g"
)
JOIN_SETUP = (
    "CREATE TABLE customers (id int PRIMARY KEY, name text); "
    "CREATE TABLE orders (id int PRIMARY KEY, customer_id int, total int); "
    "INSERT INTO customers SELECT g, 'c' || g FROM generate_series(1, 10000) g; "
    "INSERT INTO orders SELECT g, 1 + g % 10000, g FROM generate_series(1, 100000) g"
)


@pytest.mark.parametrize(
    ("setup", "text"),
    [
        (LOOKUP_SETUP, "SELECT count(*), sum(total) FROM orders WHERE customer_id = $1"),
        # the causes lab's join: orders reached from one customer through orders_customer_idx (a nested loop)
        (
            JOIN_SETUP,
            "SELECT c.name, o.id, o.total FROM customers c JOIN orders o ON o.customer_id = c.id WHERE c.id = $1",
        ),
    ],
    ids=["lookup", "join"],
)
def test_a_lost_index_is_proposed_and_checked_with_hypopg_on_postgresql_15_read_only(pg15, setup, text):
    """The statement lost its index: its plan scans orders now; the proposal (the lookup's WHERE column, the join's
    join column) made hypothetical, the generic plan (a prepared statement under force_generic_plan: PostgreSQL 15
    has no GENERIC_PLAN) uses it, at a cost within 2× of the plan's before the index was dropped. In the collector's
    read-only session; nothing is left on the server."""
    if not HYPOPG.exists():
        pytest.skip("Debian's postgresql-15-hypopg is not installed: apt-get install postgresql-15-hypopg")
    database = pg15.new_database("advice")
    target = Target("advice", pg15.pg.url(database))
    try:
        pg15.execute(
            f"CREATE EXTENSION hypopg; {setup}; CREATE INDEX orders_customer_idx ON orders (customer_id); ANALYZE",
            database,
        )
        with session.connect(target) as conn:
            before = check_index(conn, text, "CREATE INDEX ON orders (id)").cost_now  # its plan with the index
        pg15.execute("DROP INDEX orders_customer_idx", database)
        proposal = proposal_for(text, {"orders"})
        assert proposal == "CREATE INDEX CONCURRENTLY ON orders (customer_id);"
        with session.connect(target) as conn:
            tested = check_index(conn, text, proposal)
            assert conn.execute("SELECT count(*) FROM hypopg_list_indexes").fetchone()[0] == 0  # type: ignore[index]
        assert tested.untested is None and tested.uses_index, tested
        assert before is not None and tested.cost_with is not None and tested.cost_now is not None
        assert tested.cost_with <= 2 * before and tested.cost_now > 4 * before, (before, tested)
        assert tested.words().startswith("checked with hypopg: estimated cost ")
        assert pg15.execute("SELECT count(*) FROM pg_indexes WHERE tablename = 'orders'", database)[0][0] == 1
    finally:
        pg15.drop_database(database)


def proposal_for(text: str, scanned: set[str]) -> str | None:
    """steps.index_advice.proposal for a plan that went to sequential scans of `scanned` from index scans."""
    changes = [f"Index Scan using x on {t} → Seq Scan on {t}" for t in scanned]
    return proposal("plan_changed", None, {"changes": changes}, text)


def test_without_hypopg_the_proposal_says_it_is_untested(pg18):
    database = pg18.new_database("advice")
    try:
        pg18.execute("CREATE TABLE orders (id int, customer_id int)", database)
        with session.connect(Target("advice", pg18.pg.url(database))) as conn:
            tested = check_index(conn, "SELECT id FROM orders WHERE customer_id = $1", "CREATE INDEX ON orders (id)")
    finally:
        pg18.drop_database(database)
    assert tested.words() == "not tested: hypopg is not installed in this database"


def test_a_dropped_index_s_undo_is_checked_with_hypopg_in_the_deploy_s_analysis(pg15, warehouse):
    """The deploy's analysis, its target reachable (PostgreSQL 15 with hypopg in the watched database): the
    index_dropped detection says its undo was checked with hypopg, the plan using the hypothetical index at a fraction
    of the cost."""
    if not HYPOPG.exists():
        pytest.skip("Debian's postgresql-15-hypopg is not installed: apt-get install postgresql-15-hypopg")
    database = pg15.new_database("shop")
    try:
        pg15.execute(
            "CREATE EXTENSION hypopg; CREATE TABLE orders (id int PRIMARY KEY, customer_id int); "
            "INSERT INTO orders SELECT g, g % 1000 FROM generate_series(1, 100000) g; "
            "CREATE INDEX orders_customer_idx ON orders (customer_id); ANALYZE orders",
            database,
        )
        slowed = {81: {"text": LIST, "calls": (20, 20), "ms": (2.0, 40.0)}}
        deployed_at, shop = store_in(pg15, database, warehouse, "advice-v2", slowed)
        for at in (deployed_at - timedelta(seconds=40), deployed_at + timedelta(seconds=15)):
            capture_catalog(warehouse, shop, at)
            pg15.execute("DROP INDEX IF EXISTS orders_customer_idx", database)
        result = analyse_deploy(AnalysisRun(warehouse, SETTINGS, live_targets={"main": shop}), "advice-v2")
    finally:
        pg15.drop_database(database)
    row = result.verdicts.set_index("queryid").loc[81]
    assert row["cause"] == "index_dropped", row[["cause", "cause_detail"]]
    found = re.search(
        r"; undo checked with hypopg: estimated cost ([\d,.]+) now, ([\d,.]+) with it \(the plan uses it\)$",
        row["cause_detail"],
    )
    assert found, row["cause_detail"]
    now, with_it = (float(g.replace(",", "")) for g in found.groups())
    assert with_it < now / 4, row["cause_detail"]


PLAN = {
    "Plan": {
        "Node Type": "Hash Join",
        "Join Type": "Inner",
        "Plans": [
            {"Node Type": "Index Scan", "Relation Name": "orders", "Alias": "o", "Index Name": "orders_customer_idx"},
            {
                "Node Type": "Hash",
                "Plans": [
                    {
                        "Node Type": "Bitmap Heap Scan",
                        "Relation Name": "Customers",
                        "Alias": "Customers",
                        "Plans": [{"Node Type": "Bitmap Index Scan", "Index Name": "customers_region_idx"}],
                    }
                ],
            },
        ],
    }
}


def test_the_plan_from_before_is_pinned_in_pg_hint_plan_s_words():
    assert pin_hint(PLAN) == (
        '/*+ HashJoin("Customers" o) IndexScan(o orders_customer_idx) BitmapScan("Customers" customers_region_idx) '
        'Leading((o "Customers")) */'
    )
    assert pin_hint({"Plan": {"Node Type": "Result"}}) is None


def test_a_plan_changed_with_nothing_named_says_analyze_and_the_hint_to_pin_the_plan_from_before():
    import pandas as pd

    from radar_pipeline.steps.index_advice import _pin_unnamed

    diff = {"shape_changed": True, "pin_before": pin_hint(PLAN)}
    frame = pd.DataFrame(
        {
            "verdict": ["detected", "detected", "detected"],
            "cause": ["plan_changed", "plan_changed", "more_rows"],
            "cause_detail": ["Index Scan using … → Seq Scan on orders", "plan changed; index … dropped", None],
            "named_changes": [None, '[{"kind": "index_dropped"}]', None],
            "plan_diff": [diff, diff, diff],
        }
    )
    _pin_unnamed(frame, frame["cause"] == "plan_changed")
    assert frame.loc[0, "cause_detail"] == (
        "Index Scan using … → Seq Scan on orders; nothing named changed: try ANALYZE on its tables (a new sample of "
        f"their statistics); to keep the plan from before meanwhile, with pg_hint_plan: {pin_hint(PLAN)}"
    )
    assert frame.loc[1, "cause_detail"] == "plan changed; index … dropped"  # the named change says what to undo
    assert pd.isna(frame.loc[2, "cause_detail"])
