"""r3wire.torch against a real (CPU) torch: tensors into the encoders, decoded arrays out as tensors."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson
import pytest

from r3wire import EncodeError, R3WireError, decode_array, decode_routes, encode_array, encode_routes
from r3wire.errors import DecodeError

torch: Any = pytest.importorskip("torch")

from r3wire.torch import (  # noqa: E402  # only importable usefully once torch is known to be present
    TORCH_DTYPES,
    decode_array_tensor,
    decode_routes_tensor,
    routes_to_tensor,
    tensor_to_numpy,
    to_tensor,
)


def _ids(shape: tuple[int, ...] = (5, 4, 2), high: int = 128, dtype: Any = torch.int64) -> Any:
    generator = torch.Generator().manual_seed(sum(shape) + high)
    return torch.randint(0, high, shape, generator=generator, dtype=dtype)


# --- tensors into the encoders -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["uint8", "int16", "int32", "int64"])
def test_encode_routes_accepts_a_tensor(dtype: str) -> None:
    ids = _ids(dtype=getattr(torch, dtype))
    envelope = encode_routes(ids)
    assert envelope == encode_routes(ids.numpy())
    assert decode_routes(envelope).tolist() == ids.tolist()


def test_contiguous_cpu_tensor_is_viewed_not_copied() -> None:
    ids = _ids(dtype=torch.int32)
    host = tensor_to_numpy(ids)
    assert host.ctypes.data == ids.data_ptr()
    ids[0, 0, 0] = 99  # the view sees writes to the tensor: it is the same memory
    assert host[0, 0, 0] == 99


def test_tensor_that_requires_grad_is_detached_first() -> None:
    values = torch.linspace(-1.0, 1.0, 12, dtype=torch.float32).reshape(3, 4).requires_grad_(True)
    with pytest.raises(RuntimeError, match="requires grad"):
        values.numpy()  # what a naive adapter would call
    host = tensor_to_numpy(values)
    assert host.ctypes.data == values.data_ptr()
    assert decode_array(encode_array(values)).tolist() == values.tolist()
    assert values.requires_grad  # the caller's tensor is untouched
    assert values.grad_fn is None


def test_non_leaf_tensor_with_grad_history() -> None:
    base = torch.ones(2, 3, 2, requires_grad=True)
    derived = (base * 3).to(torch.int32)  # an integer result of a graph computation
    assert decode_routes(encode_routes(derived)).tolist() == [[[3, 3]] * 3] * 2
    grad_view = base * 2
    assert grad_view.grad_fn is not None
    assert tensor_to_numpy(grad_view).tolist() == (base * 2).tolist()


def test_non_contiguous_view_is_encoded_in_logical_order() -> None:
    full = _ids(shape=(6, 4, 8), dtype=torch.int32)
    view = full.transpose(0, 1)[:, ::2, 1:7:2]  # non-contiguous, permuted, strided
    assert not view.is_contiguous()
    host = tensor_to_numpy(view)
    assert np.shares_memory(host, full.numpy())  # still a view: the one copy is the encoder's C-order copy
    envelope = encode_routes(view)
    assert envelope["shape"] == list(view.shape)
    assert decode_routes(envelope).tolist() == view.tolist()


def test_grad_and_non_contiguous_together() -> None:
    values = torch.arange(24, dtype=torch.float64).reshape(2, 3, 4).requires_grad_(True)
    view = values.permute(2, 0, 1)
    back = decode_array(encode_array(view))
    assert back.shape == (4, 2, 3)
    assert back.tolist() == view.tolist()


def test_conjugate_and_negative_views_are_resolved() -> None:
    values = torch.tensor([1.0, -2.5, 3.0])
    negated = torch._neg_view(values)
    assert negated.is_neg()
    assert tensor_to_numpy(negated).tolist() == [-1.0, 2.5, -3.0]


def test_bfloat16_is_a_clear_encode_error() -> None:
    with pytest.raises(EncodeError, match=r"array\.dtype must be a dtype NumPy can hold, got torch\.bfloat16"):
        encode_array(torch.zeros(3, dtype=torch.bfloat16))
    with pytest.raises(EncodeError, match=r"routes\.dtype"):
        encode_routes(torch.zeros(1, 1, 1, dtype=torch.bfloat16))


def test_float_tensor_is_not_routes() -> None:
    with pytest.raises(EncodeError, match=r"routes\.dtype must be an integer dtype, got float32"):
        encode_routes(torch.zeros(1, 2, 2))


def test_sparse_and_meta_tensors_are_encode_errors() -> None:
    with pytest.raises(EncodeError, match=r"array\.layout must be torch\.strided"):
        encode_array(torch.zeros(3).to_sparse())
    with pytest.raises(EncodeError, match=r"routes\.device must be a device holding data"):
        encode_routes(torch.zeros(1, 2, 2, dtype=torch.int32, device="meta"))


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch calls nested tensors a prototype
def test_a_nested_tensor_is_named_by_its_layout() -> None:
    nested = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    with pytest.raises(EncodeError, match=r"^array\.layout must be torch\.strided \(a dense tensor\), got a nested"):
        encode_array(nested)


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch calls MaskedTensor a prototype
def test_a_tensor_subclass_is_blamed_on_itself_not_its_dtype() -> None:
    from torch.masked import masked_tensor

    masked = masked_tensor(torch.tensor([1.0, 99.0]), torch.tensor([True, False]))
    message = (
        r"^array must be a tensor \.numpy\(\) can read \(.*not a tensor subclass such as MaskedTensor.*\), "
        r"got a MaskedTensor \(\.numpy\(\) is not supported for tensor subclasses\.\)$"
    )
    with pytest.raises(EncodeError, match=message):
        encode_array(masked)  # refused, so its hidden 99.0 never travels; and float32 is not the reason


def test_a_fake_tensor_is_blamed_on_itself() -> None:
    fake_tensor: Any = pytest.importorskip("torch._subclasses.fake_tensor")
    with fake_tensor.FakeTensorMode():
        fake = torch.zeros(1, 1, 3, dtype=torch.int32)
    with pytest.raises(EncodeError, match=r"^routes must be a tensor \.numpy\(\) can read .*got a FakeTensor"):
        encode_routes(fake)


def test_a_tensor_inside_vmap_is_blamed_on_itself() -> None:
    errors: list[BaseException] = []

    def encode(row: Any) -> Any:
        try:
            encode_array(row)
        except EncodeError as exc:
            errors.append(exc)
        return row

    torch.func.vmap(encode)(torch.zeros(2, 3))
    assert len(errors) == 1
    assert re.match(r"^array must be a tensor \.numpy\(\) can read .*torch\.func\.vmap\), got a Tensor", str(errors[0]))


def test_tensor_to_numpy_rejects_non_tensors() -> None:
    with pytest.raises(EncodeError, match=r"tensor must be a torch\.Tensor, got list"):
        tensor_to_numpy([1, 2])


# --- arrays out as tensors ----------------------------------------------------------------------------------


@pytest.mark.parametrize("num_experts", [8, 256, 384, 40_000])
def test_decode_routes_tensor_round_trip_and_dtype_map(num_experts: int) -> None:
    ids = _ids(high=num_experts)
    envelope = orjson.dumps(encode_routes(ids, num_experts=num_experts))
    tensor = decode_routes_tensor(envelope, num_experts=num_experts)
    expected = {8: torch.uint8, 256: torch.uint8, 384: torch.int16, 40_000: torch.int32}[num_experts]
    assert tensor.dtype == expected
    assert tensor.device.type == "cpu"
    assert torch.equal(tensor.long(), ids)


def test_routes_to_tensor_shares_the_decoded_buffer() -> None:
    routes = decode_routes(encode_routes(_ids(dtype=torch.int16, high=300)))
    assert routes.flags.writeable
    tensor = routes_to_tensor(routes)
    assert tensor.data_ptr() == routes.ctypes.data
    tensor[0, 0, 0] = 7
    assert routes[0, 0, 0] == 7


@pytest.mark.parametrize("name", TORCH_DTYPES)
def test_to_tensor_maps_every_supported_dtype(name: str) -> None:
    array = np.arange(6).reshape(2, 3).astype(name)
    tensor = to_tensor(array)
    assert tensor.dtype == getattr(torch, name)
    assert tensor.data_ptr() == array.ctypes.data
    assert tensor.tolist() == array.tolist()


def test_read_only_array_is_copied_without_warning() -> None:
    # pytest turns warnings into errors here, so torch's "not writable" warning would fail this test.
    array = np.frombuffer(bytes(range(12)), dtype=np.uint8).reshape(2, 3, 2)
    assert not array.flags.writeable
    tensor = routes_to_tensor(array)
    assert tensor.data_ptr() != array.ctypes.data
    assert tensor.tolist() == array.tolist()
    tensor[0, 0, 0] = 200  # writable, and writing does not reach the read-only source
    assert array[0, 0, 0] == 0


@pytest.mark.parametrize(
    "array",
    [
        np.arange(24, dtype=np.int32).reshape(2, 3, 4)[::-1],  # negative stride
        np.arange(24, dtype=">i4").reshape(2, 3, 4),  # big-endian
        np.arange(24, dtype=np.int16).reshape(2, 3, 4)[:, :, ::2],  # positive strides: shared, see below
    ],
    ids=["negative-stride", "big-endian", "strided"],
)
def test_layouts_torch_cannot_share_are_copied_exactly(array: Any) -> None:
    tensor = routes_to_tensor(array)
    assert tensor.tolist() == array.tolist()
    assert tensor.dtype == getattr(torch, array.dtype.name)
    shared = array.flags.writeable and array.dtype.isnative and min(array.strides) >= 0
    assert np.shares_memory(tensor.numpy(), array) == shared


def test_zero_dim_and_empty_arrays() -> None:
    assert to_tensor(np.array(5, dtype=">i8")).shape == ()
    assert to_tensor(np.array(5, dtype=">i8")).item() == 5
    empty = decode_routes_tensor(encode_routes(np.zeros((0, 48, 8), dtype=np.int32)))
    assert empty.shape == (0, 48, 8)
    assert empty.dtype == torch.uint8


@pytest.mark.parametrize("dtype", ["uint16", "uint32", "uint64", "U3", "object", "complex64"])
def test_dtype_torch_cannot_hold_is_a_clear_error(dtype: str) -> None:
    shown = re.escape(str(np.dtype(dtype)))
    with pytest.raises(R3WireError, match=rf"array\.dtype must be a dtype torch supports in full.*got {shown}$"):
        to_tensor(np.zeros(3, dtype=dtype))


def test_routes_to_tensor_checks_shape_and_route_dtype() -> None:
    with pytest.raises(R3WireError, match=r"routes must be a 3-d array \[rows, layers, top_k\] \(.*got shape \[2, 3\]"):
        routes_to_tensor(np.zeros((2, 3), dtype=np.uint8))
    with pytest.raises(R3WireError, match=r"routes\.dtype must be one of \['uint8', 'int16', 'int32'\], got uint32"):
        routes_to_tensor(np.zeros((1, 2, 2), dtype=np.uint32))
    # vLLM's uint16 above 256 experts: the message says what to pass.
    with pytest.raises(R3WireError, match=r"int32'\] \(uint16 ids, as vLLM sends them.*pass num_experts=.*got uint16"):
        routes_to_tensor(np.zeros((1, 2, 2), dtype=np.uint16))
    with pytest.raises(R3WireError, match=r"array\.dtype must be .* \(uint16 ids, .*pass num_experts="):
        to_tensor(np.zeros((1, 2), dtype=np.uint16))
    # A padded batch is not one trajectory's routes: the message names the function for it.
    with pytest.raises(R3WireError, match=r"a padded batch \[batch, max_len, layers, top_k\] or a mask, use r3wire"):
        routes_to_tensor(np.zeros((1, 6, 3, 8), dtype=np.uint8))
    with pytest.raises(R3WireError, match="routes must be a NumPy array, got list"):
        routes_to_tensor([[[1]]])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("convert", "field"),
    [(to_tensor, "array"), (routes_to_tensor, "routes")],
    ids=["to_tensor", "routes_to_tensor"],
)
def test_masked_arrays_are_refused_not_unmasked(convert: Any, field: str) -> None:
    ma: Any = np.ma  # untyped in NumPy 1.24's stubs
    masked = ma.array(np.array([[[1, 99]]], dtype=np.uint8), mask=[[[0, 1]]])
    message = rf"^{field} must be an array without a mask \(send arr\.filled\(value\).*got a numpy\.ma\.MaskedArray$"
    with pytest.raises(R3WireError, match=message):
        convert(masked)


@pytest.mark.parametrize(
    ("device", "message"),
    [
        ("nonsense", r"^device must be a torch device \('cpu', 'cuda:0', a torch\.device\), got 'nonsense' \("),
        ([1], r"^device must be a torch device .*got \[1\] \("),
        ("cuda:-1", r"^device must be a torch device"),
    ],
)
def test_a_device_that_is_no_device_is_refused(device: Any, message: str) -> None:
    envelope = encode_routes(_ids())
    converts: list[Callable[[], Any]] = [
        lambda: to_tensor(np.zeros(2, np.int32), device=device),
        lambda: routes_to_tensor(decode_routes(envelope), device=device),
        lambda: decode_routes_tensor(envelope, device=device),
        lambda: decode_array_tensor(encode_array(np.zeros(2, np.int32)), device=device),
    ]
    for convert in converts:
        with pytest.raises(R3WireError, match=message):
            convert()


def test_a_device_this_torch_reports_missing_is_refused_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    if not torch.cuda.is_available():
        with pytest.raises(R3WireError, match=r"^device must be a device this torch can use \(torch\.cuda\.is_"):
            to_tensor(np.zeros(2, np.int32), device="cuda")
    # An index past the count, checked before the payload is touched: a malformed payload is not even read.
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(
        R3WireError, match=r"^device must be a device this torch can use \(2 cuda devices\), got 'cuda:2'$"
    ):
        decode_routes_tensor(b"not even JSON", device="cuda:2")
    with pytest.raises(R3WireError, match=r"^pin_memory must be a bool, got 'yes'$"):
        decode_routes_tensor(b"not even JSON", pin_memory="yes")  # type: ignore[arg-type]


def test_device_moves_the_tensor() -> None:
    routes = decode_routes(encode_routes(_ids()))
    on_cpu = routes_to_tensor(routes, device="cpu")
    assert on_cpu.data_ptr() == routes.ctypes.data  # .to() the device it is already on is not a copy
    elsewhere = routes_to_tensor(routes, device=torch.device("meta"))  # a real non-CPU device on any machine
    assert elsewhere.device.type == "meta"
    assert elsewhere.shape == routes.shape
    assert elsewhere.dtype == torch.uint8


def test_pin_memory() -> None:
    routes = decode_routes(encode_routes(_ids()))
    if not torch.accelerator.is_available():
        with pytest.raises(RuntimeError):  # torch cannot pin host memory without an accelerator
            routes_to_tensor(routes, pin_memory=True)
        return
    pinned = routes_to_tensor(routes, pin_memory=True)
    assert pinned.is_pinned()
    assert pinned.tolist() == routes.tolist()


def test_decode_array_tensor() -> None:
    values = np.array([[-0.0, np.nan, 1.5]], dtype=np.float32)
    tensor = decode_array_tensor(encode_array(values), ndim=2)
    assert tensor.dtype == torch.float32
    assert tensor.numpy().tobytes() == values.tobytes()  # bit for bit, NaN payload and -0.0 included
    mask = decode_array_tensor(encode_array(np.array([True, False])), dtypes="bool")
    assert mask.tolist() == [True, False]


def test_decode_array_tensor_refuses_unsigned_wide_dtypes() -> None:
    envelope = encode_array(np.arange(4, dtype=np.uint16))
    with pytest.raises(DecodeError, match="dtype must be one of"):
        decode_array_tensor(envelope)
    with pytest.raises(R3WireError, match=r"dtypes must be dtypes torch supports in full"):
        decode_array_tensor(envelope, dtypes=("uint16",))


def test_a_list_of_tensors_numpy_cannot_read_is_refused_by_r3wire() -> None:
    grad = torch.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(EncodeError) as caught:  # torch's RuntimeError escaped from NumPy's conversion
        encode_array([grad, grad])
    assert caught.value.field == "array"
    assert "requires grad" in str(caught.value)


@pytest.mark.parametrize("dtypes", [5, 2.5, b"int32", object()])
def test_decode_array_tensor_refuses_dtypes_that_are_no_names(dtypes: Any) -> None:
    envelope = encode_array(np.arange(4, dtype=np.int32))
    with pytest.raises(R3WireError, match=r"^dtypes must be a dtype name or a collection of names"):
        decode_array_tensor(envelope, dtypes=dtypes)
    assert decode_array_tensor(envelope, dtypes=["int32"]).tolist() == [0, 1, 2, 3]
    names = (d for d in ["int32"])  # any iterable of names works
    assert decode_array_tensor(envelope, dtypes=names).tolist() == [0, 1, 2, 3]  # type: ignore[arg-type]
    endless = itertools.repeat("int32")  # read one name past the set, never to its end
    with pytest.raises(R3WireError, match=r"^dtypes must be at most 9 dtype names .*, got more than 9$"):
        decode_array_tensor(envelope, dtypes=endless)  # type: ignore[arg-type]
