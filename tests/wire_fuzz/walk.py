"""Where the counts, lengths, varints, tags and batch fields of a request frame are.

Walks a request frame with its schema (the MessageSpecs of `kafka_ext.protocol.schema`, read
directly: the compiled codec is what is under test, so this walk shares none of its code) and
returns every place a structural mutation can hit: the size prefix, header fields, array
counts, string and bytes lengths (int16/int32 or compact varint), tagged-field sections,
scalars, and inside a records field each batch header field and each record's varints.

Pure and tolerant: bytes in, sites out; a frame that stops making sense (because an earlier
mutation broke it) ends the walk and yields the sites found so far.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache

from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.schema import FieldSpec, MessageSpec, StructSpec

_FIXED = {"bool": ">?", "int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i",
          "uint32": ">I", "int64": ">q", "float64": ">d", "uuid": ">16s"}
_WIDTHS = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8,
           "float64": 8, "uuid": 16}
_INT32 = struct.Struct(">i")

# Positions inside a magic v2 batch (Kafka's DefaultRecordBatch), with their encodings.
BATCH_FIELDS = (
    ("base_offset", 0, "int64"), ("batch_length", 8, "int32"),
    ("partition_leader_epoch", 12, "int32"), ("magic", 16, "int8"), ("crc", 17, "uint32"),
    ("attributes", 21, "int16"), ("last_offset_delta", 23, "int32"),
    ("base_timestamp", 27, "int64"), ("max_timestamp", 35, "int64"),
    ("producer_id", 43, "int64"), ("producer_epoch", 51, "int16"),
    ("base_sequence", 53, "int32"), ("records_count", 57, "int32"),
)
BATCH_HEADER_BYTES = 61
LOG_OVERHEAD = 12  # base offset and batch length: what batch_length does not count
# A magic v0/v1 message: offset int64, size int32, crc uint32, magic int8, attributes int8,
# timestamp int64 (v1 only), key bytes, value bytes.
LEGACY_FIELDS = (("offset", 0, "int64"), ("message_size", 8, "int32"), ("crc", 12, "uint32"),
                 ("magic", 16, "int8"), ("attributes", 17, "int8"))


@dataclass(slots=True)
class Site:
    """One mutable place in a frame.

    `kind` says what it is ("count", "length", "tag_count", "tag_id", "tag_size", "marker",
    "scalar", "frame_size", "header", "batch", "record", "legacy"); `encoding` how it is
    written ("int8".."int64", "uint32", "uvarint", "varint", "varlong"); `end` is where what it
    counts or measures ends (its own end for a scalar); `batch` is the start of the v2 batch
    (or v0/v1 message) it belongs to, -1 outside records, so a mutation can fix that CRC.
    """

    kind: str
    name: str
    pos: int
    width: int
    encoding: str
    value: int
    end: int
    batch: int = -1
    compact: bool = False  # a compact length or count: the wire holds value + 1 (0 = null)


@dataclass(slots=True)
class BatchSpan:
    """A record batch (magic 2) or legacy message (magic 0/1) found inside a records field."""

    pos: int
    end: int
    magic: int
    compressed: bool


@dataclass(slots=True)
class Walk:
    """Everything found in one frame."""

    api_key: int
    api_version: int
    sites: list[Site]
    batches: list[BatchSpan]
    complete: bool  # the whole frame made sense to the end of its schema
    body_end: int  # where the schema's message ended (-1 unless complete)


class _Stop(Exception):
    """The frame stops making sense here."""


@cache
def _specs() -> dict[int, MessageSpec]:
    return {k: m.spec for k, m in registry().requests.items()}


def request_spec(api_key: int) -> MessageSpec | None:
    return _specs().get(api_key)


def read_uvarint(buf: bytes, pos: int, end: int, max_bytes: int = 5) -> tuple[int, int]:
    """An unsigned LEB128 varint; _Stop if cut short or longer than max_bytes."""
    value = shift = 0
    for i in range(max_bytes):
        if pos + i >= end:
            raise _Stop
        byte = buf[pos + i]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + i + 1
        shift += 7
    raise _Stop


def read_varint(buf: bytes, pos: int, end: int, max_bytes: int = 5) -> tuple[int, int]:
    """A zigzag varint (Kafka's record fields)."""
    raw, pos = read_uvarint(buf, pos, end, max_bytes)
    return (raw >> 1) ^ -(raw & 1), pos


class _Walker:
    def __init__(self, frame: bytes, end: int) -> None:
        self.buf = frame
        self.end = end
        self.sites: list[Site] = []
        self.batches: list[BatchSpan] = []

    def fixed(self, pos: int, type_name: str) -> tuple[int, int]:
        width = _WIDTHS[type_name]
        if pos + width > self.end:
            raise _Stop
        (value,) = struct.unpack_from(_FIXED[type_name], self.buf, pos)
        if type_name == "uuid":
            value = int.from_bytes(value, "big")
        return int(value), pos + width

    def site(self, kind: str, name: str, pos: int, new_pos: int, encoding: str, value: int,
             end: int | None = None, batch: int = -1, compact: bool = False) -> Site:
        s = Site(kind, name, pos, new_pos - pos, encoding, value,
                 new_pos if end is None else end, batch, compact)
        self.sites.append(s)
        return s

    # -- schema-driven part --------------------------------------------------------------------

    def struct(self, spec: StructSpec, version: int, flexible: bool, pos: int, path: str,
               end: int | None = None) -> int:
        limit = self.end if end is None else end
        for f in spec.fields:
            if version not in f.versions or (flexible and version in f.tagged_versions):
                continue
            pos = self.field(f, version, flexible, pos, f"{path}.{f.attr}", limit)
        if flexible:
            pos = self.tags(spec, version, pos, path, limit)
        return pos

    def tags(self, spec: StructSpec, version: int, pos: int, path: str, limit: int) -> int:
        start = pos
        count, pos = read_uvarint(self.buf, pos, limit)
        section = self.site("tag_count", f"{path}.<tags>", start, pos, "uvarint", count)
        known = {f.tag: f for f in spec.fields
                 if f.tag is not None and version in f.versions and version in f.tagged_versions}
        for _ in range(count):
            tag_pos = pos
            tag, pos = read_uvarint(self.buf, pos, limit)
            self.site("tag_id", f"{path}.<tag {tag}>", tag_pos, pos, "uvarint", tag)
            size_pos = pos
            size, pos = read_uvarint(self.buf, pos, limit)
            self.site("tag_size", f"{path}.<tag {tag} size>", size_pos, pos, "uvarint", size,
                      end=pos + size)
            if pos + size > limit:
                raise _Stop
            f = known.get(tag)
            if f is not None:
                self.field(f, version, True, pos, f"{path}.{f.attr}", pos + size, tagged=True)
            pos += size
        section.end = pos
        return pos

    def field(self, f: FieldSpec, version: int, flexible: bool, pos: int, path: str,
              limit: int, tagged: bool = False) -> int:
        compact = flexible and (f.flexible_versions is None or version in f.flexible_versions)
        if f.is_array:
            start = pos
            if compact:
                raw, pos = read_uvarint(self.buf, pos, limit)
                count = raw - 1
                s = self.site("count", path, start, pos, "uvarint", count, compact=True)
            else:
                count, pos = self.fixed(pos, "int32")
                s = self.site("count", path, start, pos, "int32", count)
            if count > limit - pos:
                raise _Stop
            for i in range(max(count, 0)):
                item = f"{path}[{i}]"
                if f.struct is not None:
                    pos = self.struct(f.struct, version, flexible, pos, item, limit)
                else:
                    pos = self.primitive(f.element_type, compact, pos, item, limit)
            s.end = pos
            return pos
        if f.struct is not None:
            if version in f.nullable_versions:
                start = pos
                if tagged:
                    marker, pos = read_uvarint(self.buf, pos, limit)
                    self.site("marker", path, start, pos, "uvarint", marker)
                    present = marker != 0
                else:
                    marker, pos = self.fixed(pos, "int8")
                    self.site("marker", path, start, pos, "int8", marker)
                    present = marker >= 0
                if not present:
                    return pos
            return self.struct(f.struct, version, flexible, pos, path, limit)
        return self.primitive(f.type, compact, pos, path, limit)

    def primitive(self, type_name: str, compact: bool, pos: int, path: str, limit: int) -> int:
        start = pos
        if type_name in _FIXED:
            value, pos = self.fixed(pos, type_name)
            if pos > limit:
                raise _Stop
            if type_name not in ("bool", "float64"):
                self.site("scalar", path, start, pos, type_name, value)
            return pos
        if compact:
            raw, pos = read_uvarint(self.buf, pos, limit)
            size = raw - 1
            encoding = "uvarint"
        else:
            encoding = "int16" if type_name == "string" else "int32"
            size, pos = self.fixed(pos, encoding)
        content_end = pos + max(size, 0)
        if content_end > limit:
            raise _Stop
        self.site("length", path, start, pos, encoding, size, end=content_end, compact=compact)
        if type_name == "records" and size > 0:
            self.records(pos, content_end, path)
        return content_end

    # -- records fields ------------------------------------------------------------------------

    def records(self, pos: int, end: int, path: str) -> None:
        try:
            while end - pos >= 17:
                (length,) = _INT32.unpack_from(self.buf, pos + 8)
                magic = self.buf[pos + 16]
                batch_end = min(end, pos + LOG_OVERHEAD + max(length, 0))
                if magic == 2:
                    self.batch_v2(pos, batch_end, f"{path}<batch@{pos}>")
                elif magic in (0, 1):
                    self.legacy(pos, batch_end, magic, f"{path}<message@{pos}>")
                else:
                    return
                if length <= 0:
                    return
                pos = batch_end
        except _Stop:
            return  # a broken records field: the frame around it still walks on

    def batch_v2(self, pos: int, end: int, path: str) -> None:
        if end - pos < BATCH_HEADER_BYTES:
            raise _Stop
        attributes = struct.unpack_from(">h", self.buf, pos + 21)[0]
        compressed = attributes & 0x07 != 0
        self.batches.append(BatchSpan(pos, end, 2, compressed))
        for name, offset, encoding in BATCH_FIELDS:
            value, after = self.fixed(pos + offset, encoding)
            self.site("batch", f"{path}.{name}", pos + offset, after, encoding, value,
                      end=end if name in ("batch_length", "records_count") else None, batch=pos)
        if compressed:
            return  # the records are inside the codec's stream: byte flips reach them
        count = struct.unpack_from(">i", self.buf, pos + 57)[0]
        at = pos + BATCH_HEADER_BYTES
        for i in range(max(0, min(count, end - at))):
            at = self.record(at, end, pos, f"{path}.records[{i}]")

    def record(self, pos: int, end: int, batch: int, path: str) -> int:
        def varint(name: str, at: int, encoding: str = "varint", until: int | None = None
                   ) -> tuple[int, int]:
            value, after = read_varint(self.buf, at, end, 10 if encoding == "varlong" else 5)
            self.site("record", f"{path}.{name}", at, after, encoding, value, end=until,
                      batch=batch)
            return value, after

        length, at = varint("length", pos)
        record_end = at + max(length, 0)
        self.sites[-1].end = record_end
        if record_end > end:
            raise _Stop
        value, at = self.fixed(at, "int8")
        self.site("record", f"{path}.attributes", at - 1, at, "int8", value, batch=batch)
        _, at = varint("timestamp_delta", at, "varlong")
        _, at = varint("offset_delta", at)
        for part in ("key", "value"):
            size, after = read_varint(self.buf, at, record_end)
            self.site("record", f"{path}.{part}_length", at, after, "varint", size,
                      end=after + max(size, 0), batch=batch)
            at = after + max(size, 0)
        headers, at = varint("headers_count", at, until=record_end)
        for h in range(max(0, min(headers, record_end - at))):
            for part in ("key", "value"):
                size, after = read_varint(self.buf, at, record_end)
                self.site("record", f"{path}.headers[{h}].{part}_length", at, after, "varint",
                          size, end=after + max(size, 0), batch=batch)
                at = after + max(size, 0)
        return record_end

    def legacy(self, pos: int, end: int, magic: int, path: str) -> None:
        attributes = self.buf[pos + 17] if pos + 17 < end else 0
        self.batches.append(BatchSpan(pos, end, magic, attributes & 0x07 != 0))
        for name, offset, encoding in LEGACY_FIELDS:
            value, after = self.fixed(pos + offset, encoding)
            self.site("legacy", f"{path}.{name}", pos + offset, after, encoding, value,
                      end=end if name == "message_size" else None, batch=pos)
        at = pos + 18
        if magic == 1:
            value, at = self.fixed(at, "int64")
            self.site("legacy", f"{path}.timestamp", at - 8, at, "int64", value, batch=pos)
        for part in ("key", "value"):
            size, after = self.fixed(at, "int32")
            self.site("legacy", f"{path}.{part}_length", at, after, "int32", size,
                      end=after + max(size, 0), batch=pos)
            at = after + max(size, 0)


def walk(frame: bytes) -> Walk:
    """The sites of a request frame (size prefix included); partial if the frame is broken."""
    w = _Walker(frame, len(frame))
    api_key = api_version = -1
    try:
        size, pos = w.fixed(0, "int32")
        w.site("frame_size", "size", 0, pos, "int32", size, end=len(frame))
        api_key, pos = w.fixed(pos, "int16")
        w.site("header", "api_key", 4, pos, "int16", api_key)
        api_version, pos = w.fixed(pos, "int16")
        w.site("header", "api_version", 6, pos, "int16", api_version)
        correlation_id, pos = w.fixed(pos, "int32")
        w.site("header", "correlation_id", 8, pos, "int32", correlation_id)
        start = pos
        client_id_size, pos = w.fixed(pos, "int16")
        w.site("length", "header.client_id", start, pos, "int16", client_id_size,
               end=pos + max(client_id_size, 0))
        pos += max(client_id_size, 0)
        spec = request_spec(api_key)
        if spec is None or api_version not in spec.valid_versions:
            return Walk(api_key, api_version, w.sites, w.batches, False, -1)
        flexible = api_version in spec.flexible_versions
        if flexible:  # request header v2: its own tagged fields
            pos = w.tags(StructSpec("RequestHeader"), api_version, pos, "header", len(frame))
        body_end = w.struct(spec.struct, api_version, flexible, pos, spec.name)
        return Walk(api_key, api_version, w.sites, w.batches, True, body_end)
    except _Stop:
        return Walk(api_key, api_version, w.sites, w.batches, False, -1)


def walk_records(records: bytes) -> Walk:
    """The sites of a bare records section (a decompressed batch payload behind a header)."""
    w = _Walker(records, len(records))
    w.records(0, len(records), "inner")
    return Walk(-1, -1, w.sites, w.batches, True, len(records))
