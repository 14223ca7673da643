"""The guard every explicit-stack walk of a parsed document uses against what only a document built in process can
hold: a container inside itself, and containers shared so widely that the walk would never end.

JSON text parses into a tree: each dict and list appears once. A document built in process can reference one
container from several places (a DAG) or from inside itself (a reference cycle). A walker handles each reference
as the copy the document's JSON text would hold, since that is what :func:`r3wire.dumps` would write and what a
peer would parse. A cycle has no JSON text (``dumps`` refuses it): it is refused. Sharing has one, but it can be
exponentially larger than the document in memory (``x = [x, x]`` twenty times is a million copies of the innermost
list): walking it again is allowed up to :data:`SHARED_ITEMS_LIMIT` items, then refused. A trainer that puts one
``token_ids`` list in two choices, or sends ``[body] * 16`` as a batch, stays far below that.

The protocol, for a walker with an explicit stack: :meth:`Guard.enter` a container before pushing its children,
:meth:`Guard.child` each child container as it is pushed (before any copy of it is made), then push :data:`EXIT`
below the children, or :meth:`Guard.leave` at once when there were none; popping :data:`EXIT` is
:meth:`Guard.leave`. The entered containers are then exactly the ancestors of what is pushed, so a child among
them closes a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence, Sized
from typing import Final

from r3wire.errors import DecodeError

__all__ = ["EXIT", "SHARED_ITEMS_LIMIT", "Guard"]

SHARED_ITEMS_LIMIT: Final = 1 << 20
"""Items of shared containers a walk may visit again: about a million (a second of walking at most, measured at
~1 µs an item in :func:`r3wire.formats.find_routes`; at least 2 MB of the JSON text the references stand for).

A count of items, not of containers: one shared list of a million ids costs a million each time it is reached
again, and an empty one nothing. Not tied to ``max_elements``, which bounds the ids of one array (a byte each,
in C); a walked item costs a Python step and, in :func:`r3wire.loads`, a copied container."""

EXIT: Final = ("r3wire._walk.EXIT",)
"""The marker a walker pushes below a container's children: popping it leaves that container."""


class Guard:
    """Cycle and sharing bookkeeping of one walk (see the module docstring for the protocol).

    ``render`` turns the keys and indexes from the root into the JSONPath errors are named by.
    """

    __slots__ = ("_entered", "_limit", "_on_path", "_render", "_seen", "_shared")

    def __init__(self, root: object, render: Callable[[Sequence[object]], str], limit: int = SHARED_ITEMS_LIMIT):
        self._render = render
        self._limit = limit
        self._shared = 0
        self._seen = {id(root)}  # every container reached, by identity (the document keeps them all alive)
        self._on_path: set[int] = set()
        self._entered: list[tuple[int, object]] = []  # (identity, key) of each container from the root down

    def enter(self, node: object, key: object) -> None:
        """``node``'s children (reached under ``key`` from the entered container above, anything at the root) are
        about to be pushed."""
        ident = id(node)
        self._on_path.add(ident)
        self._entered.append((ident, key))

    def leave(self) -> None:
        """The last entered container's children are all walked."""
        ident, _ = self._entered.pop()
        self._on_path.discard(ident)

    def child(self, item: Sized, key: object) -> None:
        """``item``, a container under ``key`` of the last entered one, is about to be pushed.

        Raises:
            DecodeError: ``item`` is one of the entered containers (a reference cycle), or walking it again would
                take the items walked again past the limit; the field is its JSONPath.
        """
        ident = id(item)
        if ident not in self._seen:
            self._seen.add(ident)
            return
        if ident in self._on_path:
            depth = next(i for i, (entered, _) in enumerate(self._entered) if entered == ident)
            raise DecodeError.make(
                self._path(key),
                "a tree of values (no reference cycles)",
                f"a reference to its own enclosing container {self._render(self._keys(depth))}",
                raw=True,
            )
        self._shared += len(item)
        if self._shared > self._limit:
            raise DecodeError.make(
                self._path(key),
                f"a document whose shared containers (one object referenced from several places, which JSON text "
                f"cannot hold) repeat at most {self._limit} items in all",
                "more (a container referenced again and again)",
                raw=True,
            )

    def _keys(self, depth: int) -> list[object]:
        """The keys from the root down to the entered container at ``depth`` (the root's own key left out)."""
        return [key for _, key in self._entered[1 : depth + 1]]

    def _path(self, key: object) -> str:
        return self._render([*self._keys(len(self._entered) - 1), key])
