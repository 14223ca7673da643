"""The guard every explicit-stack walk of a parsed document uses against what only a document built in process can
hold: a container inside itself, and containers shared so widely that the walk would never end.

JSON text parses into a tree: each dict and list appears once. A document built in process can reference one
container from several places (a DAG) or from inside itself (a reference cycle). A walker handles each reference
as the copy the document's JSON text would hold, since that is what :func:`r3wire.dumps` would write and what a
peer would parse. A cycle has no JSON text (``dumps`` refuses it): it is refused. Sharing has one, but it can be
exponentially larger than the document in memory (``x = [x, x]`` twenty times is a million copies of the innermost
list): walking it again is allowed up to :data:`SHARED_ITEMS_LIMIT` items or :data:`SHARED_FACTOR` times the
document's own, whichever is more, then refused. A trainer that puts one ``token_ids`` list in two choices, or
sends ``[body] * 16`` as a batch, stays within that.

What is made again is counted in items, by one cost model for every walker. A container reached again costs its
length. A routes value or envelope decoded again costs the elements its first decoding yielded, whatever its wire
form (a base64 string costs its ids, not nothing; an envelope its ids, not its five members): a walker that decodes
(:func:`r3wire.loads`, :func:`r3wire.formats.read_response`) calls :meth:`Guard.decoding` before each decoding and
:meth:`Guard.decoded` after the first (``read_response`` counts a routes field's whole reading: its ids, and the
token ids and logprobs it reads beside them again with it). The count is the first decoding's, not what a header
declares: exact for every format (a zstd frame's text says nothing cheap about its size), with no header parsed
twice, and still charged before the memory is spent again. The document's own is the items of its distinct
containers plus the elements of each distinct value's first decoding, so the factor compares like with like. A value
is always decoded once before it is decoded again, so its own count is there when it is charged; a value the walk
has not decoded yet is not counted yet (never by what its header declares, which a hostile value could inflate past
what it holds): that can only make a refusal come earlier than the whole document would allow, never let more
through.

The protocol, for a walker with an explicit stack: before pushing the first child container of a container,
:meth:`Guard.enter` it and push :data:`EXIT` (popping it is :meth:`Guard.leave`); pass each child container to
:meth:`Guard.child` as it is pushed, before any copy of it is made. The entered containers are then exactly the
ancestors of what is pushed, so a child among them closes a cycle. A container without containers inside is never
entered: it cannot be an ancestor. A walker over every container of large documents (:func:`r3wire.loads`) may
test ``id(item) in guard.seen`` itself and call :meth:`Guard.child` only when it is (a first reach only adds the
identity to ``seen``): that keeps the cost on a tree to one set lookup and one insertion per container.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence, Sized
from typing import Any, Final, overload

from r3wire._typeset import distinct_types, is_mapping
from r3wire.errors import DecodeError, R3WireError, describe

__all__ = ["EXIT", "SHARED_FACTOR", "SHARED_ITEMS_LIMIT", "Guard", "copy_list", "holds_any", "own_len"]

SHARED_ITEMS_LIMIT: Final = 1 << 20
"""Items a walk may make again (walk, copy or decode) whatever the document's size: about a million (a second of
walking at most, measured at ~1 µs an item in :func:`r3wire.formats.find_routes`; a MiB to 8 MiB of ids decoded).

A count of items, not of containers: one shared list of a million ids costs a million each time it is reached
again, and an empty one nothing; a routes value decoded again costs its elements. Not tied to ``max_elements``,
which bounds the ids of one array (a byte each, in C); a walked item costs a Python step and, in
:func:`r3wire.loads`, a copied container."""

SHARED_FACTOR: Final = 16
"""Past :data:`SHARED_ITEMS_LIMIT`, a document may still have this many times its own items (each distinct
container's, and each distinct value's elements as first decoded, counted once) made again: ``[body] * 16``, a
batch of one parsed body sixteen times, is read in full by :func:`r3wire.loads` too, which copies every container,
and by :func:`r3wire.formats.read_response`, which decodes its routes sixteen times, whatever the body's size. The
walk then costs at most about 17 times what the same document as a tree would hold: bounded by what the caller
holds, never by how often it is referenced."""


class _Unbounded:
    """The type of :data:`_UNBOUNDED`: ``most`` not given to :func:`copy_list`."""


_UNBOUNDED: Final = _Unbounded()

EXIT: Final = ("r3wire._walk.EXIT",)
"""The marker a walker pushes below a container's children: popping it leaves that container."""


def holds_any(items: Sequence[object], kinds: tuple[type, ...]) -> bool:
    """Whether any of ``items`` is an instance of ``kinds``, decided on each distinct type (the set is built in C):
    a long list of numbers or strings is sorted out without a Python step per item, by the same predicate as the
    walk's own ``isinstance``, subclasses included."""
    return any(issubclass(cls, kinds) for cls in distinct_types(items))


@overload
def copy_list(value: list[Any] | tuple[Any, ...], *, most: int | None = None) -> list[Any]: ...
@overload
def copy_list(
    value: Iterable[Any], *, most: int | None, field: str | None, expected: str, error: type[R3WireError] = ...
) -> list[Any]: ...
def copy_list(
    value: Iterable[Any],
    *,
    most: int | _Unbounded | None = _UNBOUNDED,
    field: str | None = None,
    expected: str = "",
    error: type[R3WireError] = R3WireError,
) -> list[Any]:
    """A new exact list of the items of ``value``: a list or tuple (a subclass too) read from its storage, as orjson
    and NumPy read one; any other iterable (a caller's sequence, an array) by iterating it, up to ``most`` items,
    through :func:`caller_items` (``field``, ``expected`` and ``error`` name a refusal of its iteration).

    ``most`` must be given for anything but a list or tuple (the overloads make mypy hold every caller to it):
    ``range(10**12)`` is a sequence too, and an iterator may never end. A caller expecting at most n items passes
    ``most=n + 1`` and refuses "more than n" when that many came back; ``most=None`` says the caller bounded the
    input itself.

    Never sized by ``__len__``: ``list(value)`` preallocates what a caller's ``__len__`` says, so one that lies
    (10**12) made a bare ``MemoryError``, and one that returns a negative or huge number a ``ValueError`` or
    ``OverflowError``.

    Raises:
        R3WireError (or ``error``): the iterable's own ``__iter__`` or ``__next__`` raised.
        TypeError: ``most`` not given for an input that is not a list or tuple (a bug in r3wire, never the
            caller's input: mypy refuses such a call).
    """
    if isinstance(value, list):
        return list.copy(value)
    if isinstance(value, tuple):
        return list(tuple.__iter__(value))  # a tuple iterator's length hint is the tuple's own size
    if isinstance(most, _Unbounded):
        raise TypeError("copy_list of an iterable that is not a list or tuple needs most=")
    # islice has no length hint: the list grows as it is read.
    return list(itertools.islice(caller_items(value, field, expected, error), most))


def read_count(items: Sized, count: int, *, whole: bool) -> str:
    """How many ``items`` :func:`copy_list` read from a caller's sequence with ``most=count + 1``, for an error:
    exact when the sequence was read ``whole`` or held no more than ``count``, else at least one too many."""
    return f"{len(items)}" if whole or len(items) <= count else f"more than {count}"


def caller_items(
    value: Iterable[Any], field: str | None, expected: str, error: type[R3WireError] = R3WireError
) -> Iterator[Any]:
    """The items of a caller's iterable, read one at a time (an endless one is read only as far as the consumer
    goes). What its own ``__iter__`` or ``__next__`` raises, whatever the class, is refused as ``error`` at
    ``field`` with ``expected``, the caller's exception chained: never leaked as a ``TypeError`` of r3wire's.
    Exceptions of the consumer's own work on an item are not caught.

    Raises:
        R3WireError (or ``error``): the iterable's ``__iter__`` or ``__next__`` raised.
    """
    try:
        iterator = iter(value)
    except Exception as exc:  # the caller's own code: reported, not leaked
        got = f"{type(value).__name__} whose __iter__ raised {describe(exc)}"
        raise error.make(field, expected, got, raw=True) from exc
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except Exception as exc:  # the caller's own code: reported, not leaked
            got = f"{type(value).__name__} whose iteration raised {describe(exc)}"
            raise error.make(field, expected, got, raw=True) from exc
        yield item


def own_len(value: Sized) -> int:
    """``len(value)``, for a list, tuple or dict subclass the count it holds, not what its ``__len__`` says."""
    cls = type(value)
    if cls is list or cls is dict or cls is tuple:
        return len(value)
    if isinstance(value, list):
        return list.__len__(value)
    if isinstance(value, tuple):
        return tuple.__len__(value)
    if isinstance(value, dict):
        return dict.__len__(value)
    return len(value)


def _own_items(root: object) -> int:
    """The items of every distinct container in ``root``, each counted once (what the document holds in memory)."""
    seen: set[int] = set()
    stack = [root]
    total = 0
    while stack:
        node: Any = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        total += own_len(node)
        items = node.values() if is_mapping(node) else node
        try:
            stack.extend(item for item in items if isinstance(item, (Mapping, list, tuple)))
        except TypeError:  # an item of an unhashable class (see r3wire._typeset): the ABC check refused it
            stack.extend(item for item in items if isinstance(item, (list, tuple)) or is_mapping(item))
    return total


class Guard:
    """Cycle and sharing bookkeeping of one walk (see the module docstring for the protocol).

    ``render`` turns the keys and indexes from the root into the JSONPath errors are named by.
    """

    __slots__ = (
        "_decoded",
        "_entered",
        "_on_path",
        "_own",
        "_own_decoded",
        "_render",
        "_root",
        "_shared",
        "seen",
    )

    def __init__(self, root: object, render: Callable[[Sequence[object]], str]) -> None:
        self._root = root
        self._render = render
        self._shared = 0  # items walked, copied or decoded again
        self._own = -1  # the distinct containers' items, counted once the fixed limit is passed (-1: not yet)
        # The elements each value's first decoding yielded, by the identity it is decoded from, and their sum.
        self._decoded: dict[Hashable, int] = {}
        self._own_decoded = 0
        self.seen = {id(root)}  # every container reached, by identity (the document keeps them all alive)
        self._on_path: set[int] = set()
        # The entered containers from the root down. Their keys are not kept (a walker's stack then needs no tuple
        # per container): an error finds them by identity, once.
        self._entered: list[Any] = []

    def enter(self, node: object) -> None:
        """``node``'s children are about to be pushed."""
        self._on_path.add(id(node))
        self._entered.append(node)

    def leave(self) -> None:
        """The last entered container's children are all walked."""
        self._on_path.discard(id(self._entered.pop()))

    def child(self, item: Sized, key: object) -> None:
        """``item``, a container under ``key`` of the last entered one, is about to be pushed: reached again, its
        items count as walked again.

        Raises:
            DecodeError: ``item`` is one of the entered containers (a reference cycle), or walking it again would
                take what is made again past the limit; the field is its JSONPath.
        """
        ident = id(item)
        if ident not in self.seen:
            self.seen.add(ident)
            return
        if ident in self._on_path:
            depth = next(i for i, entered in enumerate(self._entered) if entered is item)
            raise DecodeError.make(
                self.path(key),
                "a tree of values (no reference cycles)",
                f"a reference to its own enclosing container {self._render(self._keys(depth))}",
                raw=True,
            )
        self._charge(own_len(item), lambda: self.path(key))

    def decoding(self, value: Hashable, where: Callable[[], str]) -> None:
        """A routes value or envelope, identified by ``value`` (the identities of the objects it is decoded from),
        is about to be decoded: decoded before, it counts the elements that first decoding yielded, before any
        memory is spent on it again.

        Raises:
            DecodeError: decoding it again would take what is made again past the limit; the field is ``where()``.
        """
        elements = self._decoded.get(value)
        if elements is not None:
            self._charge(elements, where)

    def decoded(self, value: Hashable, elements: int) -> None:
        """``value``'s first decoding yielded ``elements``: the document's own, and the cost of each decoding
        again."""
        if value not in self._decoded:
            self._decoded[value] = elements
            self._own_decoded += elements

    def _charge(self, cost: int, where: Callable[[], str]) -> None:
        """Count ``cost`` items made again.

        Raises:
            DecodeError: past the limit; the field is ``where()``.
        """
        self._shared += cost
        if self._shared <= SHARED_ITEMS_LIMIT:
            return
        if self._own < 0:
            # Counted once, only by a walk that got this far: a tree never pays for it.
            self._own = _own_items(self._root)
        limit = max(SHARED_ITEMS_LIMIT, SHARED_FACTOR * (self._own + self._own_decoded))
        if self._shared > limit:
            raise DecodeError.make(
                where(),
                f"a document whose shared containers and values (one object referenced from several places, which "
                f"JSON text cannot hold) repeat at most {limit} items in all ({SHARED_FACTOR} times the document's "
                f"own, or {SHARED_ITEMS_LIMIT}; a value decoded again counts its elements)",
                "more (a container or value referenced again and again)",
                raw=True,
            )

    def _keys(self, depth: int) -> list[object]:
        """The keys from the root down to the entered container at ``depth``."""
        keys = []
        for parent, node in zip(self._entered[:depth], self._entered[1 : depth + 1], strict=True):
            items = parent.items() if is_mapping(parent) else enumerate(parent)
            keys.append(next(key for key, item in items if item is node))
        return keys

    def path(self, key: object) -> str:
        """The JSONPath of the item under ``key`` of the last entered container (found by identity: errors only)."""
        return self._render([*self._keys(len(self._entered) - 1), key])
