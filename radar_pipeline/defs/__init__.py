"""Dagster objects: assets, schedules, jobs and resources. radar_pipeline.definitions assembles them."""
