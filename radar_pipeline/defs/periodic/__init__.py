"""The periodic check: hourly verdicts for regressions with no deploy behind them, and their alerts."""
