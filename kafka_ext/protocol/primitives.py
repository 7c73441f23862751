"""Readers and writers for the variable-length wire types; fixed-size ones are inlined by the compiler.

Readers have the shape `(buf, pos) -> (value, new_pos)` and check every length against the bytes
left before slicing, so a lying length costs nothing. `buf` is `bytes` (or anything sliceable
and accepted by `struct.unpack_from`); records are returned as `memoryview` slices so the
produce path never copies batch bytes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from kafka_ext.protocol.errors import DecodeError

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")

_NULL16 = I16.pack(-1)
_NULL32 = I32.pack(-1)

# bytes/bytearray records at least this long leave the encode buffer as their own part;
# shorter ones are cheaper to append than to carry as a separate buffer.
INLINE_RECORDS_MAX_BYTES = 4096


def read_uvarint(buf: Any, pos: int) -> tuple[int, int]:
    """Unsigned LEB128 varint of at most 5 bytes (Kafka's int32 range)."""
    try:
        byte = buf[pos]
        if byte < 0x80:
            return byte, pos + 1
        # Two bytes (128..16383) is the usual size of a records length: no loop for it.
        second = buf[pos + 1]
        if second < 0x80:
            return (byte & 0x7F) | (second << 7), pos + 2
        value = (byte & 0x7F) | ((second & 0x7F) << 7)
        shift = 14
        pos += 2
        while True:
            byte = buf[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value, pos
            shift += 7
            if shift > 28:
                raise DecodeError("unsigned varint longer than 5 bytes")
    except IndexError:
        raise DecodeError("truncated unsigned varint") from None


def write_uvarint(out: bytearray, value: int) -> None:
    if value < 0:
        raise ValueError(f"unsigned varint cannot hold {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def uvarint_bytes(value: int) -> bytes:
    out = bytearray()
    write_uvarint(out, value)
    return bytes(out)


def _slice(buf: Any, pos: int, size: int) -> int:
    end = pos + size
    if end > len(buf):
        raise DecodeError(f"length {size} at {pos} points past the end ({len(buf)} bytes)")
    return end


# -- strings -------------------------------------------------------------------------------

def read_string(buf: Any, pos: int) -> tuple[str, int]:
    (size,) = I16.unpack_from(buf, pos)
    pos += 2
    if size < 0:
        raise DecodeError("null for a non-nullable string")
    end = _slice(buf, pos, size)
    return str(buf[pos:end], "utf-8"), end


def read_nullable_string(buf: Any, pos: int) -> tuple[str | None, int]:
    (size,) = I16.unpack_from(buf, pos)
    pos += 2
    if size < 0:
        return None, pos
    end = _slice(buf, pos, size)
    return str(buf[pos:end], "utf-8"), end


def read_compact_string(buf: Any, pos: int) -> tuple[str, int]:
    size = buf[pos]  # one-byte length (up to 126 characters) without a call
    if size < 0x80:
        pos += 1
    else:
        size, pos = read_uvarint(buf, pos)
    if size == 0:
        raise DecodeError("null for a non-nullable compact string")
    end = _slice(buf, pos, size - 1)
    return str(buf[pos:end], "utf-8"), end


def read_compact_nullable_string(buf: Any, pos: int) -> tuple[str | None, int]:
    size = buf[pos]  # one-byte length (up to 126 characters) without a call
    if size < 0x80:
        pos += 1
    else:
        size, pos = read_uvarint(buf, pos)
    if size == 0:
        return None, pos
    end = _slice(buf, pos, size - 1)
    return str(buf[pos:end], "utf-8"), end


def write_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out += _NULL16
        return
    data = value.encode()
    out += I16.pack(len(data))
    out += data


def write_compact_string(out: bytearray, value: str | None) -> None:
    if value is None:
        out.append(0)
        return
    data = value.encode()
    write_uvarint(out, len(data) + 1)
    out += data


# -- bytes ---------------------------------------------------------------------------------

def read_bytes(buf: Any, pos: int) -> tuple[bytes, int]:
    (size,) = I32.unpack_from(buf, pos)
    pos += 4
    if size < 0:
        raise DecodeError("null for non-nullable bytes")
    end = _slice(buf, pos, size)
    return bytes(buf[pos:end]), end


def read_nullable_bytes(buf: Any, pos: int) -> tuple[bytes | None, int]:
    (size,) = I32.unpack_from(buf, pos)
    pos += 4
    if size < 0:
        return None, pos
    end = _slice(buf, pos, size)
    return bytes(buf[pos:end]), end


def read_compact_bytes(buf: Any, pos: int) -> tuple[bytes, int]:
    size, pos = read_uvarint(buf, pos)
    if size == 0:
        raise DecodeError("null for non-nullable compact bytes")
    end = _slice(buf, pos, size - 1)
    return bytes(buf[pos:end]), end


def read_compact_nullable_bytes(buf: Any, pos: int) -> tuple[bytes | None, int]:
    size, pos = read_uvarint(buf, pos)
    if size == 0:
        return None, pos
    end = _slice(buf, pos, size - 1)
    return bytes(buf[pos:end]), end


def write_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += _NULL32
        return
    out += I32.pack(len(value))
    out += value


def write_compact_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out.append(0)
        return
    write_uvarint(out, len(value) + 1)
    out += value


# -- records (opaque batches) --------------------------------------------------------------

def read_records(buf: Any, pos: int) -> tuple[memoryview | None, int]:
    (size,) = I32.unpack_from(buf, pos)
    pos += 4
    if size < 0:
        return None, pos
    end = _slice(buf, pos, size)
    return memoryview(buf)[pos:end], end


def read_compact_records(buf: Any, pos: int) -> tuple[memoryview | None, int]:
    size, pos = read_uvarint(buf, pos)
    if size == 0:
        return None, pos
    end = _slice(buf, pos, size - 1)
    return memoryview(buf)[pos:end], end


RecordsValue = bytes | bytearray | memoryview | Sequence[bytes | bytearray | memoryview] | None


def records_size(value: RecordsValue) -> int:
    if value is None:
        return -1
    if isinstance(value, (bytes, bytearray, memoryview)):
        return value.nbytes if isinstance(value, memoryview) else len(value)
    return sum(part.nbytes if isinstance(part, memoryview) else len(part) for part in value)


def write_records_body(out: bytearray, parts: list | None, value: RecordsValue) -> None:
    """Append the batches; large ones become their own parts so fetched bytes are never copied."""
    if value is None:
        return
    chunks = (value,) if isinstance(value, (bytes, bytearray, memoryview)) else value
    for chunk in chunks:
        # A memoryview borrows storage (a segment map): it always travels as its own part.
        if parts is None or (not isinstance(chunk, memoryview)
                             and len(chunk) < INLINE_RECORDS_MAX_BYTES):
            out += chunk
        else:
            parts.append(bytes(out))
            out.clear()
            parts.append(chunk)


def write_records(out: bytearray, parts: list | None, value: RecordsValue) -> None:
    out += I32.pack(records_size(value))
    write_records_body(out, parts, value)


def write_compact_records(out: bytearray, parts: list | None, value: RecordsValue) -> None:
    write_uvarint(out, records_size(value) + 1)
    write_records_body(out, parts, value)


# -- tagged fields -------------------------------------------------------------------------

def write_tagged_fields(out: bytearray, fields: list[tuple[int, bytes | bytearray]]) -> None:
    """Tags must go out in ascending order (KIP-482)."""
    fields.sort(key=lambda item: item[0])
    write_uvarint(out, len(fields))
    for tag, data in fields:
        write_uvarint(out, tag)
        write_uvarint(out, len(data))
        out += data


def check_array_count(buf: Any, pos: int, count: int) -> None:
    """Every element takes at least one byte: a count beyond the bytes left is a lie."""
    if count > len(buf) - pos:
        raise DecodeError(f"array of {count} elements in {len(buf) - pos} remaining bytes")


# Arrays of fixed-size values ([]int32, ...) are read and written with one Struct per element
# count. Those for short arrays (the usual replica lists) are built here once; generated code
# indexes this tuple directly and calls `array_struct` only for longer arrays.
ARRAY_STRUCTS_CACHED = 64


def _array_structs(code: str) -> tuple[struct.Struct, ...]:
    return tuple(struct.Struct(f">{count}{code}") for count in range(ARRAY_STRUCTS_CACHED))


ARRAY_STRUCTS: dict[str, tuple[struct.Struct, ...]] = {
    code: _array_structs(code) for code in ("?", "b", "h", "H", "i", "I", "q", "d")}


def array_struct(code: str, count: int) -> struct.Struct:
    """The Struct for `count` values of format `code`; only short arrays are cached, so a peer
    sending many distinct long counts cannot grow memory."""
    if count < ARRAY_STRUCTS_CACHED:
        return ARRAY_STRUCTS[code][count]
    return struct.Struct(f">{count}{code}")


def struct_unpack_array(code: str, count: int, buf: Any, pos: int) -> tuple[Any, ...]:
    """`count` fixed-size values at once."""
    return array_struct(code, count).unpack_from(buf, pos)


def struct_pack_array(code: str, items: Sequence[Any]) -> bytes:
    return array_struct(code, len(items)).pack(*items)
