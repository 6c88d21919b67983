"""decodelab's OpenAI-compatible HTTP server (``decodelab serve MODEL``): ``create_app`` builds the
FastAPI application; ``protocol`` checks requests and shapes responses."""
from .app import create_app
from .protocol import APIError

__all__ = ["create_app", "APIError"]
