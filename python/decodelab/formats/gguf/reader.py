"""GGUF files (versions 2 and 3) read as untrusted input: the header, the metadata and the tensor
directory, every count, length, offset and size checked against explicit limits and the file's
size before it is used. Tensor data stays in the memory map; nothing is read that the file's size
does not justify. Every problem is a ValueError naming the file and the key or tensor.

Layout (llama.cpp's gguf.h): magic "GGUF", uint32 version, uint64 tensor count, uint64 metadata
count; the metadata as (string key, uint32 type, value); per tensor: string name, uint32 n_dims,
uint64 dims (innermost first), uint32 type, uint64 offset into the data section, which starts at
the next multiple of general.alignment (default 32) after the directory. Strings are uint64
length + UTF-8 bytes; arrays are uint32 element type + uint64 count + elements.

Examples:
    >>> from decodelab.testing import write_checkpoint
    >>> from decodelab.formats.gguf.export import export
    >>> path = export(write_checkpoint("ckpt", "llama-tiny"), "m.gguf", "Q8_0")
    >>> is_gguf(path)
    True
    >>> with GGUFFile(path) as g:
    ...     print(g.version, g.metadata["general.architecture"], len(g.tensors))
    3 llama 21
"""
from __future__ import annotations

import dataclasses
import mmap
import os
import struct
from typing import Dict, List, Tuple

import numpy as np

from ..._native import _core

__all__ = ["GGUFFile", "TensorInfo", "TensorType", "TENSOR_TYPES", "is_gguf"]

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32

# Limits beyond which a file is refused rather than believed.
MAX_TENSORS = 1 << 16
MAX_KEYS = 1 << 16
MAX_KEY_BYTES = 1 << 16
MAX_STRING_BYTES = 1 << 26      # a chat template or a long token; every string is also inside the file
MAX_ARRAY_ELEMENTS = 1 << 26    # token lists are ~1e5-1e6 entries
MAX_NAME_BYTES = 256            # llama.cpp's GGML_MAX_NAME is 64; some converters write longer names
MAX_DIMS = 4
MAX_ALIGNMENT = 1 << 16
MAX_ELEMENTS = 1 << 48          # per tensor

# Metadata value types: id -> (name, struct format or None for string / array).
_SCALARS = {0: ("uint8", "<B"), 1: ("int8", "<b"), 2: ("uint16", "<H"), 3: ("int16", "<h"), 4: ("uint32", "<I"),
            5: ("int32", "<i"), 6: ("float32", "<f"), 7: ("bool", "<B"), 10: ("uint64", "<Q"), 11: ("int64", "<q"),
            12: ("float64", "<d")}
_STRING, _ARRAY = 8, 9


@dataclasses.dataclass(frozen=True)
class TensorType:
    """A ggml tensor type: elements per block and bytes per block.

    Attributes:
        name: ggml's name for the type ("F32", "Q8_0", "Q4_K", ...).
        block: elements per block (1 for the plain types, 32 or 256 for the block formats); a
            tensor's rows (its innermost dimension) must be a multiple of it.
        block_bytes: bytes per block.

    Examples:
        >>> TENSOR_TYPES[8]           # ggml type id 8: 32 int8 values and an f16 scale
        TensorType(name='Q8_0', block=32, block_bytes=34)
    """
    name: str
    block: int
    block_bytes: int


# ggml's type ids (ggml.h) with their block shapes; the ids GGUF files use.
TENSOR_TYPES: Dict[int, TensorType] = {t_id: TensorType(*v) for t_id, v in {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
    20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
    24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
    29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
}.items()}


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file's directory, checked against the file.

    Attributes:
        name: the tensor's GGUF name ("token_embd.weight", "blk.0.attn_q.weight", ...).
        shape: its dimensions in ggml order, innermost (contiguous) dimension first: numpy's
            shape is ``shape[::-1]``.
        type: its TensorType.
        offset: the absolute byte offset of its data in the file (data section start + the
            directory's offset).
        nbytes: its data's length in bytes (elements / block x block bytes).

    Examples:
        >>> from decodelab.testing import write_checkpoint
        >>> from decodelab.formats.gguf.export import export
        >>> with GGUFFile(export(write_checkpoint("ckpt", "llama-tiny"), "m.gguf", "Q8_0")) as g:
        ...     t = g.tensors["blk.0.attn_q.weight"]
        >>> t.shape, t.type.name, t.nbytes, t.n_elements     # 64 x 64 values in 128 blocks of 34 bytes
        ((64, 64), 'Q8_0', 4352, 4096)
    """
    name: str
    shape: Tuple[int, ...]   # ggml order: innermost (contiguous) dimension first
    type: TensorType
    offset: int              # absolute, in the file
    nbytes: int

    @property
    def n_elements(self) -> int:
        """The number of values in the tensor, the product of its shape."""
        n = 1
        for d in self.shape:
            n *= d
        return n


class GGUFFile:
    """A parsed GGUF file (version 2 or 3), checked whole when it is opened.

    The header, metadata and tensor directory are read and checked against explicit limits and
    the file's size (counts, string and array lengths, dimensions, types, alignment, offsets, no
    two tensors overlapping); the tensor data stays in a read-only memory map. Use it as a context
    manager, or call close(), to release the map.

    Attributes:
        path: the file's path.
        size: the file's size in bytes.
        version: the GGUF version, 2 or 3.
        metadata: key -> Python value; arrays of numbers as numpy arrays, of strings as lists, bools
            as bool.
        alignment: ``general.alignment`` (default 32), a power of two up to 65536.
        data_start: the absolute byte offset of the data section.
        tensors: name -> TensorInfo, in file order.

    Args:
        path: the GGUF file (str or path-like).

    Raises:
        ValueError: the file is not a valid GGUF file: shorter than the 24-byte header, a wrong
            magic, an unsupported version, a count, length, dimension or alignment out of its
            limit, a duplicate key or tensor name, an unknown value or tensor type, invalid UTF-8,
            a bool not 0 or 1, rows not a multiple of the type's block, a misaligned offset, data
            past the end of the file, overlapping tensors, or any read past the end; the message
            names the file and the key or tensor.
        OSError: the file does not exist or cannot be read.

    Examples:
        >>> from decodelab.testing import write_checkpoint
        >>> from decodelab.formats.gguf.export import export
        >>> path = export(write_checkpoint("ckpt", "llama-tiny"), "m.gguf", "Q8_0")
        >>> with GGUFFile(path) as g:
        ...     print(g.alignment, g.metadata["llama.block_count"], list(g.tensors)[:2])
        32 2 ['token_embd.weight', 'output_norm.weight']
        >>> with open("bad.gguf", "wb") as f:
        ...     _ = f.write(b"GGML" + bytes(28))
        >>> GGUFFile("bad.gguf")
        Traceback (most recent call last):
        ...
        ValueError: bad.gguf: not a GGUF file (magic b'GGML', expected b'GGUF')
    """

    def __init__(self, path: str):
        self.path = os.fspath(path)
        with open(self.path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < 24:
                raise ValueError(f"{self.path}: {size} bytes is too short for a GGUF header (24 bytes)")
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.size = size
        self._pos = 0
        try:
            self._parse()
        except struct.error as e:  # a read past the end that a check above did not catch
            raise ValueError(f"{self.path}: truncated GGUF file ({e})") from None

    # -- reading primitives, each bounded by the file's size ----------------------------------
    def _need(self, n: int, what: str) -> None:
        if n < 0 or self._pos + n > self.size:
            raise ValueError(f"{self.path}: {what} needs {n} bytes at offset {self._pos}, past the end of the "
                             f"file ({self.size} bytes)")

    def _scalar(self, fmt: str, what: str):
        n = struct.calcsize(fmt)
        self._need(n, what)
        v = struct.unpack_from(fmt, self._map, self._pos)[0]
        self._pos += n
        return v

    def _string(self, what: str, limit: int = MAX_STRING_BYTES) -> str:
        n = self._scalar("<Q", what + " length")
        if n > limit:
            raise ValueError(f"{self.path}: {what} is {n} bytes long, more than the limit of {limit}")
        self._need(n, what)
        raw = bytes(self._map[self._pos:self._pos + n])
        self._pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{self.path}: {what} is not valid UTF-8") from None

    def _value(self, vtype: int, key: str):
        if vtype in _SCALARS:
            name, fmt = _SCALARS[vtype]
            v = self._scalar(fmt, f"metadata {key!r}")
            if vtype == 7:
                if v > 1:
                    raise ValueError(f"{self.path}: metadata {key!r} is a bool of value {v}, not 0 or 1")
                return bool(v)
            return v
        if vtype == _STRING:
            return self._string(f"metadata {key!r}")
        if vtype == _ARRAY:
            etype = self._scalar("<I", f"metadata {key!r} element type")
            count = self._scalar("<Q", f"metadata {key!r} element count")
            if etype == _ARRAY:  # nothing in GGUF's metadata nests; refused rather than recursed into
                raise ValueError(f"{self.path}: metadata {key!r} is an array of arrays, which is not read")
            if etype not in _SCALARS and etype != _STRING:
                raise ValueError(f"{self.path}: metadata {key!r} has array element type {etype}, not a known "
                                 f"scalar or string type")
            if count > MAX_ARRAY_ELEMENTS:
                raise ValueError(f"{self.path}: metadata {key!r} has {count} elements, more than the limit of "
                                 f"{MAX_ARRAY_ELEMENTS}")
            if etype in _SCALARS:
                itemsize = struct.calcsize(_SCALARS[etype][1])
                self._need(count * itemsize, f"metadata {key!r} ({count} elements)")
                dtype = np.dtype(_SCALARS[etype][1])
                arr = np.frombuffer(self._map, dtype=dtype, count=count, offset=self._pos).copy()
                self._pos += count * itemsize
                if etype == 7:
                    if arr.size and arr.max() > 1:
                        raise ValueError(f"{self.path}: metadata {key!r} holds a bool that is not 0 or 1")
                    arr = arr.astype(bool)
                return arr
            # Strings: each at least its 8-byte length, so the count alone must fit in the file.
            self._need(count * 8, f"metadata {key!r} ({count} strings)")
            try:  # one pass in C++: a vocabulary holds 100k-300k of them
                values, self._pos = _core.gguf_strings(self._map, self._pos, count, MAX_STRING_BYTES)
            except ValueError as e:
                raise ValueError(f"{self.path}: metadata {key!r} {e}") from None
            return values
        raise ValueError(f"{self.path}: metadata {key!r} has value type {vtype}, not a known GGUF type")

    # -- the file ---------------------------------------------------------------------------------
    def _parse(self) -> None:
        magic = bytes(self._map[0:4])
        if magic != MAGIC:
            raise ValueError(f"{self.path}: not a GGUF file (magic {magic!r}, expected {MAGIC!r})")
        self._pos = 4
        self.version = self._scalar("<I", "version")
        if self.version not in VERSIONS:
            raise ValueError(f"{self.path}: GGUF version {self.version} is not supported (2 or 3)")
        n_tensors = self._scalar("<Q", "tensor count")
        n_keys = self._scalar("<Q", "metadata count")
        if n_tensors > MAX_TENSORS:
            raise ValueError(f"{self.path}: tensor count {n_tensors} is more than the limit of {MAX_TENSORS}")
        if n_keys > MAX_KEYS:
            raise ValueError(f"{self.path}: metadata count {n_keys} is more than the limit of {MAX_KEYS}")
        self.metadata: Dict[str, object] = {}
        for i in range(n_keys):
            key = self._string(f"metadata key #{i}", MAX_KEY_BYTES)
            if key in self.metadata:
                raise ValueError(f"{self.path}: metadata key {key!r} appears twice")
            vtype = self._scalar("<I", f"metadata {key!r} type")
            self.metadata[key] = self._value(vtype, key)
        align = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if isinstance(align, bool) or not isinstance(align, int) or align < 1 or align > MAX_ALIGNMENT \
                or align & (align - 1):
            raise ValueError(f"{self.path}: general.alignment {align!r} is not a power of two in [1, {MAX_ALIGNMENT}]")
        self.alignment = align
        entries: List[Tuple[str, Tuple[int, ...], int, int]] = []
        names = set()
        for i in range(n_tensors):
            name = self._string(f"tensor #{i} name", MAX_NAME_BYTES)
            if name in names:
                raise ValueError(f"{self.path}: tensor {name!r} appears twice")
            names.add(name)
            n_dims = self._scalar("<I", f"tensor {name!r} dimension count")
            if not 1 <= n_dims <= MAX_DIMS:
                raise ValueError(f"{self.path}: tensor {name!r} has {n_dims} dimensions, not 1 to {MAX_DIMS}")
            dims = tuple(self._scalar("<Q", f"tensor {name!r} dimension") for _ in range(n_dims))
            type_id = self._scalar("<I", f"tensor {name!r} type")
            offset = self._scalar("<Q", f"tensor {name!r} offset")
            entries.append((name, dims, type_id, offset))
        data_start = -(-self._pos // self.alignment) * self.alignment
        # A file without tensors (llama.cpp's vocab-only files) may end before the alignment padding.
        if data_start > self.size and entries:
            raise ValueError(f"{self.path}: the tensor data would start at {data_start}, past the end of the file")
        self.data_start = min(data_start, self.size)
        self.tensors: Dict[str, TensorInfo] = {}
        for name, dims, type_id, offset in entries:
            self.tensors[name] = self._tensor(name, dims, type_id, offset)
        spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in self.tensors.values())
        for (a0, a1, an), (b0, _, bn) in zip(spans, spans[1:]):
            if b0 < a1:
                raise ValueError(f"{self.path}: tensors {an!r} and {bn!r} overlap in the file")

    def _tensor(self, name: str, dims: Tuple[int, ...], type_id: int, offset: int) -> TensorInfo:
        if type_id not in TENSOR_TYPES:
            raise ValueError(f"{self.path}: tensor {name!r} has type id {type_id}, not a known ggml type")
        t = TENSOR_TYPES[type_id]
        n = 1
        for d in dims:
            if d < 1:
                raise ValueError(f"{self.path}: tensor {name!r} has a dimension of {d}; each must be >= 1")
            n *= d
            if n > MAX_ELEMENTS:
                raise ValueError(f"{self.path}: tensor {name!r} of shape {list(dims)} has more than {MAX_ELEMENTS} "
                                 f"elements")
        if dims[0] % t.block:
            raise ValueError(f"{self.path}: tensor {name!r} of type {t.name} has rows of {dims[0]} elements, not a "
                             f"multiple of its block of {t.block}")
        nbytes = n // t.block * t.block_bytes
        if offset % self.alignment:
            raise ValueError(f"{self.path}: tensor {name!r} offset {offset} is not a multiple of the alignment "
                             f"{self.alignment}")
        start = self.data_start + offset
        if start + nbytes > self.size:
            raise ValueError(f"{self.path}: tensor {name!r} ({nbytes} bytes at data offset {offset}) runs past the "
                             f"end of the file ({self.size} bytes)")
        return TensorInfo(name=name, shape=dims, type=t, offset=start, nbytes=nbytes)

    def data(self, name: str) -> np.ndarray:
        """The tensor's bytes as a read-only uint8 view of the map.

        The view keeps the map alive: close() leaves the map open while views of it exist.

        Args:
            name: the tensor's GGUF name, a key of ``tensors``.

        Returns:
            A 1-D read-only uint8 array of ``tensors[name].nbytes`` bytes, no copy; decode it with
            blocks.dequantize.

        Raises:
            KeyError: the file has no tensor of that name.
        """
        t = self.tensors[name]
        return np.frombuffer(self._map, dtype=np.uint8, count=t.nbytes, offset=t.offset)

    def close(self) -> None:
        """Release the memory map; where views from data() are still alive, the map stays until they go."""
        try:
            self._map.close()
        except BufferError:  # views of the data are still alive; the map goes with them
            pass

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def is_gguf(path: str) -> bool:
    """Whether the file at path starts with the GGUF magic.

    Only the first 4 bytes are read; the file is not otherwise checked (GGUFFile does that).

    Args:
        path: the file to look at.

    Returns:
        True when the file starts with ``b"GGUF"``; False otherwise, or when it cannot be read
        (missing, a directory, no permission).

    Examples:
        >>> import os
        >>> is_gguf(os.path.join(os.path.dirname(decodelab.__file__), "models", "stories260K", "stories260K.bin"))
        False
        >>> is_gguf("no-such-file.gguf")
        False
    """
    try:
        with open(path, "rb") as f:
            return f.read(4) == MAGIC
    except OSError:
        return False
