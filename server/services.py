"""The one answer a route gives when the loaded model lacks the service it needs: the 501
`not_supported_error` the spec prescribes.

The loader decides once what a model serves (see `loader.py`); `ServerState` keeps each
service as an optional, typed attribute, and every route that needs one asks through `require`
rather than probing the state or relying on a stand-in that refuses.
"""

from __future__ import annotations

from typing import TypeVar

from llamactl import NotSupportedError, not_generating

__all__ = ["NOT_A_DECISION_MODEL", "not_generating", "not_supported", "require"]

T = TypeVar("T")

NOT_A_DECISION_MODEL = "This model is not a decision model"


def not_supported(message: str) -> NotSupportedError:
    """The spec's 501 for something this server's model cannot do."""
    return NotSupportedError(message)


def require(service: T | None, refusal: str) -> T:
    """`service`, or the 501 saying `refusal` when the loaded model does not offer it."""
    if service is None:
        raise not_supported(refusal)
    return service
