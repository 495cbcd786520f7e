"""The receiver's sources: one module per tool that posts deploy events (each with NAME, authenticate and parse)."""
