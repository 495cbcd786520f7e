"""Dagster objects only: assets, checks, jobs, schedules, sensors and resources, grouped by pipeline. Every module
here is loaded by definitions.py through Dagster's defs-folder loader, so heavy libraries are imported inside the
bodies that use them."""
