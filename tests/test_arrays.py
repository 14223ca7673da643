"""encode_array / decode_array: the generic side-channel codec preserves every value bit for bit."""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import orjson
import pytest

from r3wire import WIRE_DTYPES, DecodeError, EncodeError, R3WireError, decode_array, encode_array


@pytest.mark.parametrize("name", list(WIRE_DTYPES))
@pytest.mark.parametrize("order", ["<", ">"])
def test_every_wire_dtype_round_trips_bit_exact(name: str, order: Literal["<", ">"]) -> None:
    rng = np.random.default_rng(7)
    raw = rng.integers(0, 2 if name == "bool" else 256, size=24 * 8, dtype=np.uint8)
    native = raw.view(WIRE_DTYPES[name]).reshape(3, -1)
    source = native.astype(native.dtype.newbyteorder(order))
    envelope = encode_array(source)
    assert envelope["dtype"] == name
    back = decode_array(orjson.dumps(envelope))
    assert back.dtype == WIRE_DTYPES[name].newbyteorder("=")
    assert back.tobytes() == source.astype(back.dtype).tobytes()


def test_float_specials_are_preserved() -> None:
    bits = np.array([0x80000000, 0x7FC00001, 0xFFC00000, 0x7F800000, 0xFF800000, 1], dtype=np.uint32)
    values = bits.view(np.float32)
    back = decode_array(encode_array(values))
    assert back.view(np.uint32).tolist() == bits.tolist()


def test_caller_restricts_dtypes() -> None:
    ids = np.array([[5, -1, -1]], dtype=np.int32)
    assert decode_array(encode_array(ids, dtypes=("int32",)), dtypes=("int32",), ndim=2).tolist() == [[5, -1, -1]]
    with pytest.raises(EncodeError, match=r"array.dtype must be one of \['int32'\], got int64"):
        encode_array(ids.astype(np.int64), dtypes=("int32",))
    with pytest.raises(DecodeError, match="dtype must be one of"):
        decode_array(encode_array(ids), dtypes=["float32"])
    with pytest.raises(DecodeError, match="shape must be an array of 3"):
        decode_array(encode_array(ids), ndim=3)


def test_single_string_dtypes_means_that_dtype() -> None:
    assert decode_array(encode_array(np.zeros(2, np.float32), dtypes="float32"), dtypes="float32").shape == (2,)


@pytest.mark.parametrize("dtypes", [(), ("float128",), ("<i4",)])
def test_bad_dtypes_argument(dtypes: Any) -> None:
    with pytest.raises(R3WireError, match="dtypes must be a non-empty subset"):
        encode_array(np.zeros(2, np.float32), dtypes=dtypes)


@pytest.mark.parametrize(
    "value",
    [
        np.zeros(2, np.complex64),
        np.array(["a"]),
        np.zeros(2, dtype="M8[s]"),
        np.zeros(2, dtype=[("a", "i4")]),
        np.array([object()]),
    ],
)
def test_unrepresentable_dtypes(value: Any) -> None:
    with pytest.raises(EncodeError, match=r"array.dtype must be one of"):
        encode_array(value)


def test_zero_dim_and_empty() -> None:
    assert decode_array(encode_array(np.array(3.5))).tolist() == 3.5
    empty = decode_array(encode_array(np.zeros((0, 4), np.int64)))
    assert empty.shape == (0, 4)
    assert empty.dtype == np.int64


def test_bool_bytes_other_than_zero_and_one_rejected() -> None:
    envelope = encode_array(np.array([1, 2], dtype=np.uint8)) | {"dtype": "bool"}
    with pytest.raises(DecodeError) as info:
        decode_array(envelope)
    assert info.value.field == "data[1]"


def test_routes_schema_is_not_an_array() -> None:
    from r3wire import encode_routes

    with pytest.raises(DecodeError) as info:
        decode_array(encode_routes(np.zeros((1, 1, 1), np.int32)))
    assert info.value.field == "schema"


def test_bool_arrays_holding_other_bytes_are_refused_not_rewritten() -> None:
    # NumPy and torch make such arrays from views of bytes; the wire format forbids the bytes, and writing them
    # as 1 would change what was handed over.
    raw = np.frombuffer(bytes([0, 1, 1, 5]), np.bool_).reshape(2, 2)
    with pytest.raises(EncodeError, match=r"^array\[1, 1\] must be a bool stored as byte 0 or 1.*got 5$"):
        encode_array(raw)
    with pytest.raises(EncodeError, match=r"^array\[1, 0\] must be a bool"):
        encode_array(raw[:, ::-1])
    clean = raw.view(np.uint8) != 0
    assert decode_array(encode_array(clean)).tolist() == [[False, True], [True, True]]


@pytest.mark.parametrize(
    "dtypes",
    [
        [["uint8"]],
        5,
        [None],
        [b"uint8"],
        (),
        b"uint8",
        # Read no further than 1024 names (range(10**12) was made a tuple first: a minute, then out of memory).
        range(10**12),
        np.broadcast_to(np.str_("uint8"), (2**31,)),
        np.zeros((2, 2), np.uint8).data,
    ],
)
def test_dtypes_that_are_not_names_are_refused(dtypes: Any) -> None:
    with pytest.raises(R3WireError, match=r"^dtypes(\[0\])? must be (a string \()?a non-empty subset of"):
        encode_array(np.zeros(2, np.uint8), dtypes=dtypes)
    with pytest.raises(R3WireError, match=r"^dtypes(\[0\])? must be (a string \()?a non-empty subset of"):
        decode_array(encode_array(np.zeros(2, np.uint8)), dtypes=dtypes)


def test_dtypes_may_be_any_iterable_of_names_even_a_generator() -> None:
    envelope = encode_array(np.zeros(2, np.uint8), dtypes=(d for d in ["int8", "uint8"]))
    assert decode_array(envelope, dtypes=(d for d in ["uint8"])).dtype == np.uint8


def test_dtypes_given_as_str_subclasses_are_read_as_their_characters() -> None:
    class Renamed(str):
        def __str__(self) -> str:  # used to turn the allowed set into ['zzz'] (and a KeyError on decode)
            return "zzz"

    env = encode_array(np.array([-1, 2], dtype=np.int8), dtypes=[Renamed("int8")])
    assert env["dtype"] == "int8"
    assert decode_array(env, dtypes=[Renamed("int8"), np.str_("uint8")]).tolist() == [-1, 2]


@pytest.mark.parametrize(
    ("values", "got"),
    [
        ([2**63 + 1, 1], "integers from 1 to 9223372036854775809, which NumPy made float64"),  # was rounded
        ([2**53 + 1, 0.5], "the integer 9007199254740993 among floats"),  # was rounded
        ([True, 2], "True"),  # was sent as 1
        ([[0.5], [np.True_]], "True"),  # was sent as 1.0 (NumPy 2 shows it as np.True_)
        ([0, 2**63, False], "False"),  # float64 holds 2**63 exactly; the bool became 0.0
        (range(10**12), "range (MemoryError)"),  # NumPy's MemoryError escaped
    ],
)
def test_a_list_numpy_would_change_is_refused(values: Any, got: str) -> None:
    with pytest.raises(EncodeError) as caught:
        encode_array(values)
    assert caught.value.got is not None
    assert got in caught.value.got


def test_a_list_numpy_keeps_exactly_is_encoded() -> None:
    assert decode_array(encode_array([[1, 2], [3, 2**62]])).tolist() == [[1, 2], [3, 2**62]]
    assert decode_array(encode_array([0.5, 2])).tolist() == [0.5, 2.0]
    assert decode_array(encode_array([True, False])).tolist() == [True, False]


class _NotIterated(np.ndarray[Any, Any]):
    def __iter__(self) -> Any:
        raise AssertionError("an array inside a list was iterated element by element")


def test_arrays_inside_a_list_are_read_by_their_dtype_not_iterated() -> None:
    # The scan for bools among numbers iterated every element of an array inside a list: 0.6 s for 3.1 M ids
    # (seconds for tensors); an array's dtype already says what its elements are.
    part = np.arange(24, dtype=np.int32).reshape(2, 3, 4).view(_NotIterated)
    assert decode_array(encode_array([part, part])).shape == (2, 2, 3, 4)
    flags = np.array([True, False]).view(_NotIterated)
    with pytest.raises(EncodeError, match=r"a bool among integers"):
        encode_array([flags, [1, 2]])
