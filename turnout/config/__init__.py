"""Typed experiment configuration: YAML → validated pydantic models, with one-line errors."""
