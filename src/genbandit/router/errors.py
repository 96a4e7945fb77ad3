"""Errors the router answers with a 4xx, each with its HTTP status and an OpenAI-style code."""

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
]


class RouterError(GenbanditError):
    """A request the router refuses; nothing was changed."""

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
