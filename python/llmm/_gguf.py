"""A minimal GGUF reader: the header, the metadata (skipped, but for general.alignment, PrismML's
prism.hadamard.* keys and the few model keys their rotation depends on) and the
tensor-info table of a little-endian GGUF file (versions 2 and 3, as ggml's docs/gguf.md describes
them), giving a tensor's GGML type id, shape and raw bytes for any type id.

llmm.load_tq2_gguf reads files with it rather than with gguf-py's GGUFReader: gguf 0.17.1 turns
every tensor's type into its GGMLQuantizationType enum while opening the file, so one tensor of a
type it does not know (42 Q2_0, PrismML's 142 PQ2_0 and 143 PTQ1_0) makes the whole file
unreadable. GGUF stores no byte count for a tensor; span is the room it has up to the next
tensor's data (or the file's end), which is how two layouts of one type id are told apart.
"""
from __future__ import annotations

import bisect
import mmap
import struct
from typing import NamedTuple

from ._llmm import Error

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
_STRING, _ARRAY = 8, 9
# Metadata value types of fixed size: struct format by GGUF type id.
_FIXED = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}

# Names of the GGML type ids an error message may show (the rest are shown as numbers).
TYPE_NAMES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K",
              12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 30: "BF16",
              34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4", 41: "Q1_0", 42: "Q2_0", 142: "PQ2_0", 143: "PTQ1_0"}


def type_name(type_id: int) -> str:
    return TYPE_NAMES.get(type_id, f"type {type_id}")


class TensorInfo(NamedTuple):
    name: str
    type_id: int
    shape: tuple  # GGUF order: shape[0] is the length of a row (k), the rest multiply to n
    offset: int  # of its data, from the file's start
    span: int  # bytes from its data to the next tensor's data or the file's end
    alignment: int


class _Cursor:
    """Little-endian reads off a memory map, refusing to run past its end."""

    def __init__(self, mm, path):
        self.mm, self.path, self.at = mm, path, 0

    def take(self, n: int) -> int:
        if n < 0 or self.at + n > len(self.mm):
            raise Error(f"GGUF file {self.path} ends inside its header (at byte {self.at}, {n} more wanted)")
        at, self.at = self.at, self.at + n
        return at

    def scalar(self, fmt: str):
        return struct.unpack_from(fmt, self.mm, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.scalar("<Q")
        at = self.take(n)
        return bytes(self.mm[at:at + n]).decode("utf-8", errors="replace")

    def value(self, vtype: int, keep: bool = False):
        """The value (arrays only when keep: the tokenizer's are long, and skipped)."""
        if vtype in _FIXED:
            return self.scalar(_FIXED[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.scalar("<I"), self.scalar("<Q")
            if etype in _FIXED and not keep:
                self.take(count * struct.calcsize(_FIXED[etype]))
                return None
            items = [self.value(etype, keep) for _ in range(count)]
            return items if keep else None
        raise Error(f"GGUF file {self.path}: unknown metadata value type {vtype} at byte {self.at - 4}")


# Metadata kept for the callers (the rest is skipped): PrismML's Hadamard fold, whose rotation a
# loader must not silently ignore, and the architecture and gated-DeltaNet head counts that its
# ssm_out permutation (prism.hadamard.gdn_v_grouped) is made of.
_KEPT_PREFIX = "prism.hadamard."
_KEPT_SUFFIXES = (".ssm.time_step_rank", ".ssm.group_count")


def _kept(key: str) -> bool:
    return key.startswith(_KEPT_PREFIX) or key == "general.architecture" or key.endswith(_KEPT_SUFFIXES)


def read_tensor_infos(path) -> list:
    """Every tensor's TensorInfo, in the order of the file's tensor-info table."""
    return read_header(path)[0]


def read_header(path):
    """(every tensor's TensorInfo, {key: value} of the metadata kept: see _kept)."""
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        c = _Cursor(mm, path)
        if bytes(mm[:4]) != _MAGIC:
            raise Error(f"{path} is not a GGUF file (no GGUF magic)")
        c.take(4)
        version = c.scalar("<I")
        if version not in (2, 3):
            swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
            why = "a big-endian GGUF file" if swapped in (2, 3) else f"GGUF version {version}"
            raise Error(f"{path}: {why} is not supported (little-endian GGUF 2 or 3 only)")
        n_tensors, n_kv = c.scalar("<Q"), c.scalar("<Q")
        alignment = _DEFAULT_ALIGNMENT
        kept = {}
        for _ in range(n_kv):
            key, vtype = c.string(), c.scalar("<I")
            keep = _kept(key)
            value = c.value(vtype, keep=keep)
            if keep:
                kept[key] = value
            if key == "general.alignment":
                if not isinstance(value, int) or value < 1 or value & (value - 1):
                    raise Error(f"{path}: general.alignment {value!r} is not a power of two")
                alignment = value
        raw = []
        for _ in range(n_tensors):
            name, n_dims = c.string(), c.scalar("<I")
            shape = tuple(c.scalar("<Q") for _ in range(n_dims))
            raw.append((name, c.scalar("<I"), shape, c.scalar("<Q")))
        data_start = -(-c.at // alignment) * alignment
        size = len(mm)
    starts = sorted({off for _, _, _, off in raw})
    infos = []
    for name, type_id, shape, off in raw:
        i = bisect.bisect_right(starts, off)
        end = data_start + starts[i] if i < len(starts) else size
        infos.append(TensorInfo(name, type_id, shape, data_start + off, end - (data_start + off), alignment))
    return infos, kept


def read_bytes(path, offset: int, count: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(count)
    if len(data) != count:
        raise Error(f"GGUF file {path} is truncated: {count} bytes wanted at byte {offset}, {len(data)} there")
    return data
