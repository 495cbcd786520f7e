"""`radar webhook serve`: deploy events over HTTP from the tools teams deploy with, and the gate's answer for CI."""
