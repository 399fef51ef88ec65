"""API-key check of the HTTP server: `Authorization: Bearer KEY` (scheme case-insensitive, key
compared in constant time) on every route except GET /health (liveness probes)."""

from __future__ import annotations

import hmac
from typing import Optional

from fastapi import FastAPI, Request

from sgl_runtime.server.errors import api_error

OPEN_PATHS = ("/health",)


def key_matches(authorization: Optional[str], api_key: str) -> bool:
    """Whether an Authorization header value carries `api_key` with the Bearer scheme."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(token.strip().encode("utf-8", "surrogatepass"), api_key.encode("utf-8"))


def install_api_key_check(app: FastAPI, api_key: str) -> None:
    @app.middleware("http")
    async def check_api_key(request: Request, call_next):
        if request.url.path in OPEN_PATHS or key_matches(request.headers.get("authorization"), api_key):
            return await call_next(request)
        return api_error(
            request, 401, "invalid or missing API key: send 'Authorization: Bearer <key>'", code="invalid_api_key"
        )
