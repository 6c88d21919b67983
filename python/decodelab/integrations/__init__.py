"""Bridges from decodelab's samplers to other libraries (``integrations.transformers``)."""
