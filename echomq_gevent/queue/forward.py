"""Methods of a public class that one of its parts carries out.

``Queue`` and ``Job`` keep Node's flat method names (``queue.get_metrics(...)``), while the
code behind them lives in parts that own their state (``queue.getters``, ``queue.admin``).
:func:`forward` makes the public method: the part's docstring and signature (``help()``,
``inspect.signature``), a call that goes to the part the owner holds under a given name.
"""
from __future__ import annotations

import functools
from typing import Any, Callable

__all__ = ["forward"]


def forward(part: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """A method that calls ``method``'s namesake on ``getattr(self, part)``."""
    name = method.__name__

    @functools.wraps(method)
    def forwarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(getattr(self, part), name)(*args, **kwargs)

    return forwarded
