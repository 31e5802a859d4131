"""Methods of a public class that one of its parts carries out.

``Queue`` and ``Job`` keep Node's flat method names (``queue.get_metrics(...)``), while the
code behind them lives in parts that own their state (``queue.getters``, ``queue.admin``).
:func:`forward` makes the public method: the part's docstring and signature (``help()``,
``inspect.signature``), a call that goes to the part the owner holds under a given name.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # the forwarded method keeps the part's signature for type checkers
    from typing import TypeVar

    from typing_extensions import Concatenate, ParamSpec

    P = ParamSpec("P")
    R = TypeVar("R")

__all__ = ["forward"]


def forward(part: str, method: Callable[Concatenate[Any, P], R]) -> Callable[Concatenate[Any, P], R]:
    """A method that calls ``method``'s namesake on ``getattr(self, part)``."""
    name = method.__name__

    @functools.wraps(method)
    def forwarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(getattr(self, part), name)(*args, **kwargs)

    return forwarded
