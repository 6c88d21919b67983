"""decodelab's OpenAI-compatible HTTP server (``decodelab serve MODEL``): ``create_app`` builds the
FastAPI application; ``protocol`` checks requests and shapes responses; ``engine`` is the
continuous-batching ``BatchEngine`` the server (or a notebook) runs requests on."""
from .app import create_app
from .engine import BatchEngine, BatchRequest, QueueFull
from .protocol import APIError

__all__ = ["create_app", "APIError", "BatchEngine", "BatchRequest", "QueueFull"]
