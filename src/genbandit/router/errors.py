"""Errors the router answers with (4xx, or 503 while its store is unreachable), each with its HTTP status and an OpenAI-style code."""

from __future__ import annotations

from ..core.validation import GenbanditError

__all__ = [
    "RouterError",
    "BadRequest",
    "Unauthorized",
    "DecisionNotFound",
    "DecisionExpired",
    "FeedbackConflict",
    "PayloadTooLarge",
    "UnknownModel",
    "InvalidValue",
    "TooManyPending",
    "StoreUnavailable",
    "RequestTimeout",
]


class RouterError(GenbanditError):
    """A request the router refuses or cannot serve now; nothing was changed."""

    status: int = 400
    code: str = "bad_request"
    type: str = "invalid_request_error"


class BadRequest(RouterError):
    status, code = 400, "malformed_request"


class Unauthorized(RouterError):
    status, code, type = 401, "invalid_api_key", "authentication_error"


class UnknownModel(RouterError):
    status, code = 404, "model_not_found"


class DecisionNotFound(RouterError):
    status, code = 404, "decision_not_found"


class FeedbackConflict(RouterError):
    status, code = 409, "feedback_conflict"


class DecisionExpired(RouterError):
    status, code = 410, "decision_expired"


class PayloadTooLarge(RouterError):
    status, code = 413, "payload_too_large"


class InvalidValue(RouterError):
    status, code = 422, "invalid_value"


class RequestTimeout(RouterError):
    status, code = 408, "request_timeout"


class TooManyPending(RouterError):
    status, code, type = 429, "too_many_pending_decisions", "rate_limit_error"


class StoreUnavailable(RouterError):
    """The state store does not answer (for example Redis is down): 503, retry later."""

    status, code, type = 503, "store_unavailable", "service_unavailable"
