"""Bands: each query's mean after a deploy against its history band (query_history)."""
