"""Read and write the safetensors format with NumPy alone (no ``safetensors`` dependency).

A file is: an unsigned 64-bit little-endian ``n``; ``n`` bytes of UTF-8 JSON (the header,
possibly padded with trailing spaces) mapping each tensor name to
``{"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}`` (byte offsets into the data
that follows the header), plus an optional ``"__metadata__": {str: str}``; then the raw
row-major little-endian bytes of every tensor.

Dtypes read: F64, F32, F16, BF16 (widened to float32: a bfloat16 is the top 16 bits of a
float32), I64, I32, I16, I8, U8, BOOL. Written: the NumPy equivalents of those; an array
whose dtype is named ``bfloat16`` (``ml_dtypes``/JAX) is written as BF16 bit for bit.
A truncated or malformed file raises ``ValueError`` naming the file and what is wrong.
"""

from __future__ import annotations

import json
import mmap
import os
import struct

import numpy as np

_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
           "I8": "i1", "U8": "u1", "BOOL": "?", "BF16": "<u2"}  # BF16: raw bits, widened on read
_NAMES = {np.dtype(v).str.lstrip("<|="): k for k, v in _DTYPES.items() if k != "BF16"}
_MAX_HEADER = 100 * 2 ** 20  # the reference implementation's cap: a larger "length" is corruption


def _bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """``uint16`` bfloat16 bit patterns -> float32 (shift into the top half; exact)."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _header(path: str, buf) -> tuple[dict, int]:
    """``(header dict, offset of the data)``; ``ValueError`` for a truncated or bad header."""
    if len(buf) < 8:
        raise ValueError(f"{path}: truncated safetensors file ({len(buf)} bytes, no 8-byte header length)")
    (n,) = struct.unpack("<Q", bytes(buf[:8]))
    if n > _MAX_HEADER or 8 + n > len(buf):
        raise ValueError(f"{path}: truncated or corrupt safetensors file (header of {n} bytes, file of {len(buf)})")
    try:
        header = json.loads(bytes(buf[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: corrupt safetensors header (not UTF-8 JSON: {e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: corrupt safetensors header (a JSON {type(header).__name__}, not an object)")
    return header, 8 + n


def _tensor(path: str, name: str, info, data: memoryview) -> np.ndarray:
    """One header entry -> its array (a copy, writable); ``ValueError`` on a bad entry."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise ValueError(f"{path}: tensor {name!r}: header entry needs dtype, shape, data_offsets: {info!r}")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dtype not in _DTYPES:
        raise ValueError(f"{path}: tensor {name!r}: unsupported dtype {dtype!r} (supported: {sorted(_DTYPES)})")
    if (not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape)
            or not isinstance(offsets, list) or len(offsets) != 2 or not all(isinstance(o, int) for o in offsets)):
        raise ValueError(f"{path}: tensor {name!r}: bad shape {shape!r} or data_offsets {offsets!r}")
    begin, end = offsets
    want = int(np.prod(shape, dtype=np.int64)) * np.dtype(_DTYPES[dtype]).itemsize
    if not 0 <= begin <= end or end - begin != want:
        raise ValueError(f"{path}: tensor {name!r}: data_offsets {offsets} hold {end - begin} bytes, "
                         f"{dtype} {shape} needs {want}")
    if end > len(data):
        raise ValueError(f"{path}: truncated safetensors file: tensor {name!r} ends at byte {end} "
                         f"of the data, which has {len(data)}")
    arr = np.frombuffer(data[begin:end], _DTYPES[dtype]).reshape(shape)
    return _bf16_to_f32(arr) if dtype == "BF16" else arr.astype(arr.dtype.newbyteorder("="))


def load_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """``{name: array}`` of every tensor in the file, in native byte order (BF16 as float32).
    The ``__metadata__`` entry is not a tensor and is dropped (see :func:`read_metadata`).
    The file is memory-mapped, so peak memory is the arrays returned, not twice the file."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        small = os.fstat(f.fileno()).st_size < 8  # (an empty file cannot be mapped)
        buf = f.read() if small else memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    header, start = _header(path, buf)
    data = memoryview(buf)[start:]
    return {name: _tensor(path, name, info, data) for name, info in header.items() if name != "__metadata__"}


def read_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The file's ``__metadata__`` (``{}`` when it has none); reads the header only."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        buf = head + f.read(min(n, _MAX_HEADER + 1))
    return dict(_header(path, buf)[0].get("__metadata__", {}))


def _encode(name: str, value) -> tuple[str, bytes, list]:
    """``(dtype code, little-endian bytes, shape)`` for one array."""
    arr = np.asarray(value)
    if arr.dtype.name == "bfloat16":  # ml_dtypes' type: NumPy has none; write its raw bits
        return "BF16", np.ascontiguousarray(arr).view(np.uint16).astype("<u2").tobytes(), list(arr.shape)
    code = _NAMES.get(arr.dtype.str.lstrip("<>|="))
    if code is None:
        raise ValueError(f"tensor {name!r}: dtype {arr.dtype} has no safetensors code (supported: {sorted(_DTYPES)})")
    return code, np.ascontiguousarray(arr, arr.dtype.newbyteorder("<")).tobytes(), list(arr.shape)


def save_safetensors(path: str | os.PathLike, tensors: dict, metadata: dict | None = None) -> None:
    """Write ``{name: array}`` (NumPy or JAX arrays) to ``path``; ``metadata``: ``{str: str}``
    stored as ``__metadata__``. Tensors are laid out in name order, back to back; the header
    is padded with spaces to a multiple of 8 bytes (so every tensor starts 8-byte aligned
    when its predecessors' sizes are, as the reference writer does)."""
    if "__metadata__" in tensors:
        raise ValueError("'__metadata__' is reserved in safetensors; it cannot name a tensor")
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise ValueError(f"safetensors metadata must map str to str: {metadata!r}")
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = dict(metadata)
    for name in sorted(tensors):
        code, raw, shape = _encode(name, tensors[name])
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(os.fspath(path), "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)
