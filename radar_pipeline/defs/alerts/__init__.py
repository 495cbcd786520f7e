"""Deliveries: Slack alerts, commit statuses and review comments, and the run-failure message."""
