"""Metrics, GPU metrics and logging helpers."""
