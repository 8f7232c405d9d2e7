"""Triton's Python backend: `model.py` models in processes of their own (docs/models.md)."""
