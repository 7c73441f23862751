"""Seeded structural mutations of recorded requests: the fuzzer's sans-IO engine.

`mutant(corpus, seed, iteration)` is a pure function: the same corpus, seed and iteration give
the same bytes on every machine (random.Random seeded with a string is stable across runs and
Python versions). Each mutation aims at a place the schema walk found (walk.py): the size
prefix, a count, a length, a varint's encoding, a tagged-field section, a scalar, a record
batch header field or a record's varints; or it cuts, splices or flips bytes. A change of
length is either propagated to the lengths that enclose it (so the lie sits deep inside an
otherwise consistent frame) or left as a lie; a batch's CRC is usually recomputed so the
mutation gets past the CRC check and reaches the validation behind it.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from crc32c import crc32c

from kafka_ext.protocol.compression import compress, decompress
from kafka_ext.protocol.errors import DecodeError
from kafka_ext.protocol.messages import registry
from kafka_ext.protocol.record_batch import Compression
from tests.wire_fuzz.corpus import Seed
from tests.wire_fuzz.walk import BATCH_HEADER_BYTES, BatchSpan, Site, Walk, walk, walk_records

_PACK = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint16": ">H",
         "uint32": ">I", "uuid": ">16s"}
_RANGES = {"int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
           "int32": (-(1 << 31), (1 << 31) - 1), "int64": (-(1 << 63), (1 << 63) - 1),
           "uint16": (0, (1 << 16) - 1), "uint32": (0, (1 << 32) - 1),
           "uuid": (0, (1 << 128) - 1)}
# Kafka's socket.request.max.bytes default: sizes around it are the interesting lies.
REQUEST_MAX_BYTES = 104857600
# Sites whose value is the byte count of what follows them; a splice inside updates them.
_MEASURES = {"length", "tag_size"}
_MEASURE_NAMES = (".batch_length", ".length", ".message_size")


@dataclass(frozen=True, slots=True)
class Mutant:
    """What one fuzz iteration sends on one connection: one frame or more, maybe cut short."""

    seed: int
    iteration: int
    source: str  # the corpus file it came from
    mutations: tuple[str, ...]  # one line per mutation applied
    data: bytes


# -- encodings ---------------------------------------------------------------------------------


def uvarint(value: int) -> bytes:
    """Unsigned LEB128, any size (values past 32 bits are lies Kafka must refuse)."""
    out = bytearray()
    value &= (1 << 70) - 1
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def zigzag(value: int, bits: int = 64) -> bytes:
    return uvarint(((value << 1) ^ (value >> (bits - 1))) & ((1 << bits) - 1))


def encode_site(site: Site, value: int) -> bytes:
    """`value` written the way `site` is written (compact lengths and counts as value + 1)."""
    if site.encoding == "uvarint":
        return uvarint(value + 1 if site.compact else value)
    if site.encoding == "varint":
        return zigzag(value, 32)
    if site.encoding == "varlong":
        return zigzag(value, 64)
    low, high = _RANGES[site.encoding]
    value = low + (value - low) % (high - low + 1)  # wrap into the field's range
    if site.encoding == "uuid":
        return value.to_bytes(16, "big")
    return struct.pack(_PACK[site.encoding], value)


def interesting(rng: random.Random, site: Site) -> int:
    """A value worth trying at `site`: an edge of its type, a neighbour, or a big lie."""
    v = site.value
    low, high = _RANGES.get(site.encoding, (-(1 << 31), (1 << 31) - 1))
    if site.encoding in ("uvarint", "varint"):
        low, high = -(1 << 31), (1 << 31) - 1
    elif site.encoding == "varlong":
        low, high = -(1 << 63), (1 << 63) - 1
    choices = [0, 1, -1, -2, v + 1, v - 1, v + 2, 2 * v + 1, high, low, high - 1, low + 1,
               127, 128, 255, 256, 0x7FFF, 0x8000, 0xFFFF, 0x10000, 1 << 20, 1 << 24,
               rng.randint(low, high), rng.randint(-1000, 1000)]
    value = rng.choice(choices)
    return max(low, min(high, value))


# -- splicing ---------------------------------------------------------------------------------


def _measures(site: Site) -> bool:
    return site.kind in _MEASURES or (site.kind in ("batch", "record", "legacy")
                                      and site.name.endswith(_MEASURE_NAMES))


def splice(buf: bytearray, w: Walk, start: int, stop: int, replacement: bytes,
           fix_lengths: bool) -> None:
    """Replace buf[start:stop]; with fix_lengths, every length that measures the changed
    bytes grows or shrinks with them (innermost first: a varint may change width too)."""
    delta = len(replacement) - (stop - start)
    buf[start:stop] = replacement
    if not fix_lengths or delta == 0:
        return
    enclosing = [s for s in w.sites if _measures(s) and s.pos + s.width <= start
                 and stop <= s.end and (start < s.end or s.kind == "tag_size")]
    for s in sorted(enclosing, key=lambda s: s.pos, reverse=True):
        new_value = s.value + delta
        if s.name.endswith(".batch_length"):
            new_value = struct.unpack_from(">i", buf, s.pos)[0] + delta
        encoded = encode_site(s, new_value)
        delta += len(encoded) - s.width
        buf[s.pos:s.pos + s.width] = encoded


def fix_crc(buf: bytearray, batch: BatchSpan) -> None:
    """Recompute the CRC of a v2 batch (CRC-32C from attributes on) or legacy message (CRC-32
    from magic on), up to where its length field says it ends."""
    (declared,) = struct.unpack_from(">i", buf, batch.pos + 8)
    end = min(batch.pos + 12 + max(declared, 0), len(buf))
    if batch.magic == 2 and end >= batch.pos + 21:
        struct.pack_into(">I", buf, batch.pos + 17, crc32c(bytes(buf[batch.pos + 21:end])))
    elif batch.magic in (0, 1) and end >= batch.pos + 16:
        struct.pack_into(">I", buf, batch.pos + 12, zlib.crc32(bytes(buf[batch.pos + 16:end])))


def _batch_of(w: Walk, site: Site) -> BatchSpan | None:
    return next((b for b in w.batches if b.pos == site.batch), None)


# -- the mutations ---------------------------------------------------------------------------
# Each takes (frame, its walk, rng) and returns a description, or None when it does not apply.
# A mutation that lies about the frame's own size returns a description starting with "!".

Mutation = Callable[[bytearray, Walk, random.Random], str | None]


def _pick(rng: random.Random, w: Walk, kinds: tuple[str, ...],
          encodings: tuple[str, ...] | None = None) -> Site | None:
    sites = [s for s in w.sites if s.kind in kinds
             and (encodings is None or s.encoding in encodings)]
    return rng.choice(sites) if sites else None


def frame_size(buf: bytearray, w: Walk, rng: random.Random) -> str:
    body = len(buf) - 4
    size = rng.choice([body + 1, body + 2, body + 7, body + 64, body - 1, body - 2, body - 5,
                       0, 1, 3, 7, -1, -(1 << 31), (1 << 31) - 1, REQUEST_MAX_BYTES,
                       REQUEST_MAX_BYTES + 1, rng.randint(body, 1 << 26)])
    size = max(-(1 << 31), size)
    struct.pack_into(">i", buf, 0, size)
    return f"!frame size {body} -> {size}"


def truncate(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    if len(buf) <= 5:
        return None
    if rng.random() < 0.6 and w.sites:
        s = rng.choice(w.sites)
        cut = rng.choice([s.pos, s.pos + 1, s.pos + s.width - 1, s.end - 1, s.end])
        where = f" at {s.kind} {s.name}"
    else:
        cut = rng.randrange(4, len(buf))
        where = ""
    cut = max(4, min(cut, len(buf) - 1))
    del buf[cut:]
    if rng.random() < 0.4:
        return f"!truncated to {cut} bytes{where}, size prefix kept"
    return f"truncated to {cut} bytes{where}"


def _set_site(buf: bytearray, w: Walk, rng: random.Random, site: Site, value: int,
              what: str) -> str:
    fix = rng.random() < 0.5
    splice(buf, w, site.pos, site.pos + site.width, encode_site(site, value), fix)
    return f"{what} {site.name}: {site.value} -> {value} ({site.encoding}" \
           f"{', lengths fixed' if fix else ''})"


def count(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    site = _pick(rng, w, ("count",))
    if site is None:
        return None
    if site.value > 0 and rng.random() < 0.25:
        # Every element twice: a well-formed request with duplicates in it.
        content = bytes(buf[site.pos + site.width:site.end])
        splice(buf, w, site.end, site.end, content, True)
        splice(buf, w, site.pos, site.pos + site.width, encode_site(site, 2 * site.value), True)
        return f"count {site.name}: every element twice ({2 * site.value})"
    return _set_site(buf, w, rng, site, interesting(rng, site), "count")


def length(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    site = _pick(rng, w, ("length",))
    if site is None:
        return None
    return _set_site(buf, w, rng, site, interesting(rng, site), "length")


def varint_encoding(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    site = _pick(rng, w, ("count", "length", "tag_count", "tag_id", "tag_size", "marker",
                          "record"), ("uvarint", "varint", "varlong"))
    if site is None:
        return None
    raw = bytes(buf[site.pos:site.pos + site.width])
    form = rng.choice(["overlong", "unterminated", "too long", "max", "to the end"])
    if form == "overlong":  # the same value with continuation bytes of zero
        pad = rng.randint(1, 5)
        encoded = bytes(b | 0x80 for b in raw) + b"\x80" * (pad - 1) + b"\x00"
    elif form == "unterminated":
        encoded = b"\xff" * rng.randint(1, 4)
    elif form == "too long":
        encoded = b"\xff" * rng.randint(5, 11) + b"\x01"
    elif form == "max":
        encoded = rng.choice([b"\xff\xff\xff\xff\x0f", b"\xff\xff\xff\xff\x07",
                              b"\xfe\xff\xff\xff\x0f", b"\xff" * 9 + b"\x01"])
    else:  # every byte from here on has its continuation bit set
        for i in range(site.pos, len(buf)):
            buf[i] |= 0x80
        return f"varint {site.name}: continuation bits to the end of the frame"
    fix = rng.random() < 0.5
    splice(buf, w, site.pos, site.pos + site.width, encoded, fix)
    return f"varint {site.name}: {raw.hex()} -> {encoded.hex()} ({form})"


def tagged_fields(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    sections = [s for s in w.sites if s.kind == "tag_count"]
    if not sections:
        return None
    section = rng.choice(sections)
    form = rng.choice(["add", "add", "count", "size", "id"])
    if form == "size":
        site = _pick(rng, w, ("tag_size",))
        if site is not None:
            return _set_site(buf, w, rng, site, interesting(rng, site), "tag size")
        form = "add"
    if form == "id":
        site = _pick(rng, w, ("tag_id",))
        if site is not None:
            return _set_site(buf, w, rng, site, rng.choice([0, 1, 2, 3, 10000, site.value + 1,
                                                            (1 << 31) - 1]), "tag id")
        form = "add"
    if form == "count":
        return _set_site(buf, w, rng, section, interesting(rng, section), "tag count")
    # A new tagged field at the end of the section: an unknown tag must be skipped, a known
    # one must carry a value of its type, a repeated or smaller one is out of order.
    tag = rng.choice([0, 1, 2, 3, 7, 10000, 10001, rng.randint(0, 1 << 20)])
    payload = rng.randbytes(rng.choice([0, 1, 2, 4, 8, 16, 100]))
    size = len(payload) if rng.random() < 0.8 else interesting(rng, section)
    entry = uvarint(tag) + uvarint(max(size, 0)) + payload
    splice(buf, w, section.end, section.end, entry, True)
    splice(buf, w, section.pos, section.pos + section.width, uvarint(section.value + 1), True)
    return f"tags {section.name}: added tag {tag} of {len(payload)} bytes (size says {size})"


def scalar(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    site = _pick(rng, w, ("scalar", "marker"))
    if site is None:
        return None
    value = interesting(rng, site) if site.kind == "scalar" else rng.choice([-1, 0, 1, 2, 127])
    buf[site.pos:site.pos + site.width] = encode_site(site, value)
    return f"scalar {site.name}: {site.value} -> {value}"


_ATTRIBUTE_VALUES = (0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x10, 0x20, 0x30, 0x40,
                     0x7FFF, -1)


def batch_header(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    site = _pick(rng, w, ("batch", "legacy"))
    if site is None:
        return None
    batch = _batch_of(w, site)
    field = site.name.rsplit(".", 1)[1]
    if field == "attributes":
        value = rng.choice([site.value ^ rng.choice(_ATTRIBUTE_VALUES),
                            (site.value & ~0x07) | rng.randint(0, 7)])
    elif field == "magic":
        value = rng.choice([0, 1, 2, 3, 127, -1])
    elif field == "crc":
        value = site.value ^ (1 << rng.randrange(32))
    else:
        value = interesting(rng, site)
    buf[site.pos:site.pos + site.width] = encode_site(site, value)
    fixed = batch is not None and field != "crc" and rng.random() < 0.75
    if fixed:
        assert batch is not None
        fix_crc(buf, batch)
    return f"batch {site.name}: {site.value} -> {value}{' (crc fixed)' if fixed else ''}"


def record_fields(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    site = _pick(rng, w, ("record",))
    if site is None:
        return None
    batch = _batch_of(w, site)
    fix = rng.random() < 0.6
    encoded = encode_site(site, interesting(rng, site))
    splice(buf, w, site.pos, site.pos + site.width, encoded, fix)
    what = f"record {site.name}: {site.value} -> {encoded.hex()}"
    if batch is not None and rng.random() < 0.8:
        fix_crc(buf, batch)
        what += " (crc fixed)"
    return what + (" (lengths fixed)" if fix else "")


def record_splice(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    """Drop or repeat one record of an uncompressed batch, lengths fixed, count maybe not."""
    lengths = [s for s in w.sites if s.kind == "record" and s.name.endswith("].length")]
    if not lengths:
        return None
    site = rng.choice(lengths)
    batch = _batch_of(w, site)
    if batch is None:
        return None
    record = bytes(buf[site.pos:site.end])
    drop = rng.random() < 0.5
    splice(buf, w, site.pos, site.end if drop else site.pos, b"" if drop else record, True)
    adjust = rng.random() < 0.5
    if adjust:
        (n,) = struct.unpack_from(">i", buf, batch.pos + 57)
        struct.pack_into(">i", buf, batch.pos + 57, max(-(1 << 31), min((1 << 31) - 1, n - 1 if drop else n + 1)))
    fix_crc(buf, batch)
    return (f"record {site.name.rsplit('.', 1)[0]}: {'dropped' if drop else 'repeated'}"
            f"{', records count adjusted' if adjust else ''} (crc fixed)")


# Zeros that inflate far past any sane batch: the broker must stop inflating at its bound.
_BOMB_BYTES = {Compression.GZIP: 64 << 20, Compression.SNAPPY: 16 << 20,
               Compression.LZ4: 64 << 20, Compression.ZSTD: 256 << 20}


@cache
def _bomb(codec: Compression) -> bytes:
    return compress(codec, bytes(_BOMB_BYTES[codec]))


def compressed_records(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    """Mutate the records inside a compressed batch and compress them again, or replace the
    compressed stream with garbage, a cut stream or a decompression bomb (CRC fixed)."""
    batches = [b for b in w.batches if b.magic == 2 and b.compressed]
    if not batches:
        return None
    batch = rng.choice(batches)
    bits = struct.unpack_from(">h", buf, batch.pos + 21)[0] & 0x07
    if bits not in iter(Compression):  # codec 5-7 from an earlier mutation: no stream to redo
        return None
    codec = Compression(bits)
    start, end = batch.pos + BATCH_HEADER_BYTES, batch.end
    form = rng.choice(["records", "records", "records", "garbage", "cut", "bomb"])
    try:
        inner = decompress(codec, bytes(buf[start:end]))
    except DecodeError:
        form = "garbage"
    if form == "records":
        # The batch header (codec cleared) in front of the records: walk.py finds their sites.
        plain = bytearray(buf[batch.pos:start]) + inner
        struct.pack_into(">h", plain, 21, struct.unpack_from(">h", plain, 21)[0] & ~0x07)
        struct.pack_into(">i", plain, 8, len(plain) - 12)
        iw = walk_records(bytes(plain))
        what = (record_splice if rng.random() < 0.2 else record_fields)(plain, iw, rng)
        if what is None:
            return None
        payload = compress(codec, bytes(plain[BATCH_HEADER_BYTES:]))
        what = f"{codec.name.lower()} batch, inner {what}"
    elif form == "garbage":
        payload = rng.randbytes(rng.choice([1, 8, 64, 512]))
        what = f"{codec.name.lower()} stream replaced by {len(payload)} random bytes"
    elif form == "cut":
        payload = bytes(buf[start:end])[:rng.randrange(max(1, end - start))]
        what = f"{codec.name.lower()} stream cut to {len(payload)} bytes"
    else:
        payload = _bomb(codec)
        what = (f"{codec.name.lower()} stream of {_BOMB_BYTES[codec] >> 20} MiB of zeros "
                f"({len(payload)} bytes)")
    splice(buf, w, start, end, payload, True)
    struct.pack_into(">i", buf, batch.pos + 8, len(payload) + BATCH_HEADER_BYTES - 12)
    fix_crc(buf, batch)
    return what + " (lengths and crc fixed)"


def header(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    if len(buf) < 12:
        return None
    api_key, api_version = struct.unpack_from(">hh", buf, 4)
    form = rng.choice(["version", "version", "key", "correlation"])
    if form == "version":
        mtype = registry().requests.get(api_key)
        versions = list(mtype.versions) if mtype is not None else [0]
        new = rng.choice(versions + [api_version + 1, api_version - 1, -1, 0x7FFF])
        new = (new + 0x8000) % 0x10000 - 0x8000  # an int16, wrapped
        struct.pack_into(">h", buf, 6, new)
        return f"header api version {api_version} -> {new}"
    if form == "key":
        new = rng.choice(sorted(registry().requests) + [-1, 9999, 0x7FFF])
        struct.pack_into(">h", buf, 4, new)
        return f"header api key {api_key} -> {new}"
    new = rng.choice([0, -1, (1 << 31) - 1, -(1 << 31)])
    struct.pack_into(">i", buf, 8, new)
    return f"header correlation id -> {new}"


def byte_flips(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    if len(buf) <= 4:
        return None
    if w.sites and rng.random() < 0.5:  # somewhere inside what one site covers
        s = rng.choice(w.sites)
        low, high = max(4, s.pos), max(4, min(len(buf), s.end))
    else:
        low, high = 4, len(buf)
    if high <= low:
        low, high = 4, len(buf)
    changed = []
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(low, high)
        buf[i] = rng.randrange(256) if rng.random() < 0.5 else buf[i] ^ (1 << rng.randrange(8))
        changed.append(i)
    return f"bytes changed at {sorted(set(changed))}"


def byte_splice(buf: bytearray, w: Walk, rng: random.Random) -> str | None:
    boundaries = sorted({4, len(buf), *(s.pos for s in w.sites if s.pos >= 4),
                         *(s.end for s in w.sites if 4 <= s.end <= len(buf))})
    at = rng.choice(boundaries)
    fix = rng.random() < 0.5
    form = rng.choice(["insert", "delete", "repeat"])
    if form == "insert":
        junk = rng.randbytes(rng.choice([1, 2, 4, 7, 64]))
        splice(buf, w, at, at, junk, fix)
        return f"inserted {len(junk)} bytes at {at}"
    later = [b for b in boundaries if b > at]
    if not later:
        return None
    stop = rng.choice(later)
    if form == "delete":
        splice(buf, w, at, stop, b"", fix)
        return f"deleted bytes {at}:{stop}"
    splice(buf, w, stop, stop, bytes(buf[at:stop]), fix)
    return f"repeated bytes {at}:{stop}"


def trailing(buf: bytearray, w: Walk, rng: random.Random) -> str:
    junk = rng.randbytes(rng.choice([1, 3, 16, 300]))
    buf += junk
    return f"{len(junk)} trailing bytes"


# (weight, name, mutation): the record ones only apply where there are batches.
MUTATIONS: tuple[tuple[int, str, Mutation], ...] = (
    (5, "frame_size", frame_size),
    (10, "truncate", truncate),
    (14, "count", count),
    (14, "length", length),
    (10, "varint", varint_encoding),
    (8, "tagged_fields", tagged_fields),
    (10, "scalar", scalar),
    (14, "batch_header", batch_header),
    (14, "record_fields", record_fields),
    (4, "record_splice", record_splice),
    (8, "compressed_records", compressed_records),
    (5, "header", header),
    (6, "byte_flips", byte_flips),
    (4, "byte_splice", byte_splice),
    (2, "trailing", trailing),
)
_WEIGHTS = [m[0] for m in MUTATIONS]
PRODUCE_SHARE = 0.33


def mutant(corpus: list[Seed], seed: int, iteration: int) -> Mutant:
    """The bytes of iteration `iteration` of the run seeded with `seed`."""
    rng = random.Random(f"wire-fuzz/{seed}/{iteration}")
    produces = [s for s in corpus if s.api_key == 0]
    # Record batches are where most of the structure is: a produce request a third of the time.
    source = rng.choice(produces if produces and rng.random() < PRODUCE_SHARE else corpus)
    buf = bytearray(source.frame)
    applied: list[str] = []
    size_lie = False
    for _ in range(rng.choices([1, 2, 3], [80, 15, 5])[0]):
        w = walk(bytes(buf))
        for _attempt in range(20):
            _weight, name, mutation = rng.choices(MUTATIONS, _WEIGHTS)[0]
            what = mutation(buf, w, rng)
            if what is not None:
                break
        else:
            name, what = "byte_flips", byte_flips(buf, w, rng) or "nothing"
        if what.startswith("!"):
            size_lie, what = True, what[1:]
        elif not size_lie and len(buf) >= 4:
            struct.pack_into(">i", buf, 0, len(buf) - 4)
        applied.append(f"{name}: {what}")
        if size_lie:
            break  # later mutations would walk a frame whose size is a lie
    data = bytes(buf)
    if rng.random() < 0.05:  # the untouched request behind it: answers must keep their order
        data += source.frame
        applied.append("followed by the unmutated request")
    return Mutant(seed, iteration, source.name, tuple(applied), data)
