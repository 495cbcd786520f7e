"""Slack: the message for a deploy's regressions, its charts, and delivery through slack-sdk."""
