"""The four record codecs of Kafka batches (gzip, snappy, lz4, zstd), bounded against bombs.

Mirrors Apache Kafka's `CompressionType` and its codec streams: snappy travels in the xerial
framing the Java client writes (raw snappy is also accepted, as librdkafka may send it), lz4 as
an LZ4 frame (KIP-57), zstd as one or more zstd frames that may lack a content size.
"""

from __future__ import annotations

import io
import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from kafka_ext.protocol.errors import DecodeError, ErrorCode, KafkaError
from kafka_ext.protocol.record_batch import BytesLike, Compression

# Bound on the bytes one batch's records section may inflate to; callers pass a tighter one
# where they know it. Beyond it the batch is treated as corrupt, never allocated.
DEFAULT_MAX_DECOMPRESSED_BYTES = 128 * 1024 * 1024

# xerial snappy stream header, as the Java client's SnappyOutputStream writes it.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(
    ">"
    "8s"  # magic: b"\x82SNAPPY\x00"
    "i"  # version: 1
    "i"  # compatibleVersion: 1
)
_XERIAL_BLOCK_LENGTH = struct.Struct(">i")  # compressed bytes of the raw snappy block that follows
_XERIAL_VERSION = 1
_XERIAL_BLOCK_BYTES = 32 * 1024  # uncompressed bytes per block, xerial's default

# gzip only (no zlib or raw deflate): Kafka's GZIP codec is java.util.zip's GZIP stream.
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_CHUNK_BYTES = 64 * 1024  # output taken per step while inflating, to stop early at the bound

# zstd framing (RFC 8878), read only to tell a whole input from a truncated one.
_ZSTD_MAGIC = struct.Struct("<I")  # frame magic number, little-endian
_ZSTD_SKIPPABLE_SIZE = struct.Struct("<I")  # bytes of a skippable frame's user data
_ZSTD_SKIPPABLE_MAGIC = 0x184D2A50  # skippable frames use magics 0x184D2A50..0x184D2A5F
_ZSTD_SKIPPABLE_MASK = 0xFFFFFFF0
_ZSTD_MAX_FRAME_HEADER_BYTES = 18  # magic 4 + descriptor 1 + window 1 + dictionary 4 + content size 8
_ZSTD_RLE_BLOCK = 1  # Block_Type of a one-byte run; every other type stores Block_Size bytes

# LZ4 frame header (KIP-57): magic, FLG, BD, optional content size and dictionary id, then HC,
# the second byte of the XXH32 of the descriptor.
_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_FLG_POS = 4
_LZ4_CONTENT_SIZE_FLAG = 0x08  # FLG bit 3: an 8-byte content size follows BD
_LZ4_DICT_ID_FLAG = 0x01  # FLG bit 0: a 4-byte dictionary id follows
_XXH32_PRIMES = (2654435761, 2246822519, 3266489917, 668265263, 374761393)
_U32 = 0xFFFFFFFF


def compress(codec: Compression, data: BytesLike, *, level: int | None = None) -> bytes:
    """Compress a records section with codec, in a form every stock Kafka client reads.

    level is the codec's own level (KIP-390's compression.<codec>.level); None is the default.
    """
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        compressor = zlib.compressobj(
            zlib.Z_DEFAULT_COMPRESSION if level is None else level, zlib.DEFLATED, _GZIP_WBITS
        )
        return compressor.compress(data) + compressor.flush()
    if codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if codec == Compression.LZ4:
        # Independent 64 KiB blocks, no content size or checksums: what Kafka's Java writer emits.
        framed: bytes = lz4.frame.compress(
            data,
            compression_level=0 if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
        return framed
    if codec == Compression.ZSTD:
        return zstandard.ZstdCompressor(level=3 if level is None else level).compress(data)
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown codec {codec}")


def decompress(
    codec: Compression, data: BytesLike, *, max_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> bytes:
    """Inflate a records section; DecodeError (CORRUPT_MESSAGE) on bad input or past max_bytes."""
    if codec == Compression.NONE:
        if len(data) > max_bytes:
            _too_large(max_bytes)
        return bytes(data)
    if codec == Compression.GZIP:
        return _gzip_decompress(data, max_bytes)
    if codec == Compression.SNAPPY:
        return _snappy_decompress(data, max_bytes)
    if codec == Compression.LZ4:
        return _lz4_decompress(data, max_bytes)
    if codec == Compression.ZSTD:
        return _zstd_decompress(data, max_bytes)
    raise KafkaError(ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, f"unknown codec {codec}")


def _too_large(max_bytes: int) -> None:
    raise DecodeError(f"compressed records inflate past {max_bytes} bytes")


def _gzip_decompress(data: BytesLike, max_bytes: int) -> bytes:
    """Inflate gzip members back to back (as java.util.zip reads them), max_bytes at most."""
    out = bytearray()
    pending = bytes(data)
    try:
        while True:
            inflater = zlib.decompressobj(_GZIP_WBITS)
            chunk = inflater.decompress(pending, _CHUNK_BYTES)
            while True:
                out += chunk
                if len(out) > max_bytes:
                    _too_large(max_bytes)
                if inflater.eof:
                    break
                if not inflater.unconsumed_tail and len(chunk) < _CHUNK_BYTES:
                    break  # all input consumed and no output held back
                chunk = inflater.decompress(inflater.unconsumed_tail, _CHUNK_BYTES)
            if not inflater.eof:
                raise DecodeError("gzip records end before the end of the stream")
            pending = inflater.unused_data
            if not pending:
                return bytes(out)
    except zlib.error as exc:
        raise DecodeError(f"gzip records do not inflate: {exc}") from exc


def _xerial_compress(data: BytesLike) -> bytes:
    """Raw snappy blocks in xerial framing: the Java client's SnappyOutputStream format."""
    parts = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, _XERIAL_VERSION, _XERIAL_VERSION)]
    with memoryview(data) as view:
        for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
            block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES]))
            parts.append(_XERIAL_BLOCK_LENGTH.pack(len(block)))
            parts.append(block)
    return b"".join(parts)


def _snappy_block(block: BytesLike, budget_bytes: int, max_bytes: int) -> bytes:
    """One raw snappy block, refused before allocation if its declared size exceeds the budget."""
    try:
        declared = cramjam.snappy.decompress_raw_len(block)
        if declared > budget_bytes:
            _too_large(max_bytes)
        return bytes(cramjam.snappy.decompress_raw(block))
    except cramjam.DecompressionError as exc:
        raise DecodeError(f"snappy records do not decompress: {exc}") from exc


def _snappy_decompress(data: BytesLike, max_bytes: int) -> bytes:
    """Xerial-framed snappy when the magic is there, raw snappy otherwise."""
    with memoryview(data) as view:
        if bytes(view[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
            return _snappy_block(view, max_bytes, max_bytes)
        if len(view) < _XERIAL_HEADER.size:
            raise DecodeError("xerial snappy header is cut short")
        out = bytearray()
        pos = _XERIAL_HEADER.size
        end = len(view)
        while pos < end:
            if end - pos < _XERIAL_BLOCK_LENGTH.size:
                raise DecodeError("xerial snappy block length is cut short")
            (block_length,) = _XERIAL_BLOCK_LENGTH.unpack_from(view, pos)
            pos += _XERIAL_BLOCK_LENGTH.size
            if block_length < 0 or block_length > end - pos:
                raise DecodeError(f"xerial snappy block of {block_length} bytes overruns the data")
            out += _snappy_block(view[pos : pos + block_length], max_bytes - len(out), max_bytes)
            pos += block_length
    return bytes(out)


def _lz4_decompress(data: BytesLike, max_bytes: int) -> bytes:
    """Inflate LZ4 frames back to back, max_bytes at most."""
    out = bytearray()
    pending = bytes(data)
    try:
        while True:
            inflater = lz4.frame.LZ4FrameDecompressor()
            chunk = inflater.decompress(pending, max_length=_CHUNK_BYTES)
            while True:
                out += chunk
                if len(out) > max_bytes:
                    _too_large(max_bytes)
                if inflater.eof or inflater.needs_input:
                    break
                chunk = inflater.decompress(b"", max_length=_CHUNK_BYTES)
            if not inflater.eof:
                raise DecodeError("lz4 records end before the end of the frame")
            pending = inflater.unused_data
            if not pending:
                return bytes(out)
    except RuntimeError as exc:  # the lz4 binding reports every LZ4F error as RuntimeError
        raise DecodeError(f"lz4 records do not decompress: {exc}") from exc


def _zstd_decompress(data: BytesLike, max_bytes: int) -> bytes:
    """Stream zstd frames (content size optional, as Java's zstd-jni writes), max_bytes at most."""
    _check_zstd_frames_whole(data)
    decompressor = zstandard.ZstdDecompressor()
    out = bytearray()
    try:
        with decompressor.stream_reader(io.BytesIO(data), read_across_frames=True) as reader:
            while True:
                chunk = reader.read(_CHUNK_BYTES)
                if not chunk:
                    break
                out += chunk
                if len(out) > max_bytes:
                    _too_large(max_bytes)
    except zstandard.ZstdError as exc:
        raise DecodeError(f"zstd records do not decompress: {exc}") from exc
    return bytes(out)


def _check_zstd_frames_whole(data: BytesLike) -> None:
    """Walk zstd frame and block headers (RFC 8878) to reject truncated input.

    The streaming reader returns a short result, not an error, when input stops mid-frame;
    this walk costs a few bytes per block and never inflates anything.
    """
    with memoryview(data) as view:
        end = len(view)
        pos = 0
        while pos < end:
            if end - pos < 4:
                raise DecodeError("zstd frame magic is cut short")
            (magic,) = _ZSTD_MAGIC.unpack_from(view, pos)
            if magic & _ZSTD_SKIPPABLE_MASK == _ZSTD_SKIPPABLE_MAGIC:
                if end - pos < 8:
                    raise DecodeError("zstd skippable frame is cut short")
                (skip_bytes,) = _ZSTD_SKIPPABLE_SIZE.unpack_from(view, pos + 4)
                pos += 8 + skip_bytes
                continue
            if magic != zstandard.MAGIC_NUMBER:
                raise DecodeError(f"zstd frame at {pos} has magic {magic:#010x}")
            try:
                frame = bytes(view[pos : pos + _ZSTD_MAX_FRAME_HEADER_BYTES])
                header_bytes = zstandard.frame_header_size(frame)
                has_checksum = zstandard.get_frame_parameters(frame).has_checksum
            except zstandard.ZstdError as exc:
                raise DecodeError(f"zstd frame header at {pos} is invalid: {exc}") from exc
            pos += header_bytes
            while True:
                if end - pos < 3:
                    raise DecodeError("zstd block header is cut short")
                block_header = view[pos] | view[pos + 1] << 8 | view[pos + 2] << 16
                block_type = (block_header >> 1) & 0x3
                block_size = block_header >> 3
                pos += 3 + (1 if block_type == _ZSTD_RLE_BLOCK else block_size)
                if block_header & 1:  # Last_Block
                    break
            pos += 4 if has_checksum else 0
        if pos != end:
            raise DecodeError("zstd records end inside a frame")


# -- message format v0's LZ4 (KAFKA-3160) ------------------------------------------------------
# Kafka before 0.10 wrote LZ4 frames whose header checksum (HC) covers the frame magic too, and
# Kafka keeps that framing for magic 0 messages: it ignores HC when reading them and writes the
# broken HC when writing them. Magic 1 and v2 batches use the standard frame.


def lz4_frame_to_kafka_3160(framed: BytesLike) -> bytes:
    """The same LZ4 frame with the header checksum message format v0 carries (over the magic)."""
    return _set_lz4_header_checksum(framed, from_pos=0)


def lz4_frame_from_kafka_3160(framed: BytesLike) -> bytes:
    """A magic 0 LZ4 frame with its header checksum made standard, whatever it was (Kafka
    ignores it for magic 0), so the standard decoder reads it."""
    return _set_lz4_header_checksum(framed, from_pos=_LZ4_FLG_POS)


def _set_lz4_header_checksum(framed: BytesLike, from_pos: int) -> bytes:
    """Rewrite HC as the XXH32 of the header from from_pos; anything that is not an LZ4 frame
    header is returned unchanged for the decoder to refuse."""
    out = bytearray(framed)
    if len(out) <= _LZ4_FLG_POS or out[:_LZ4_FLG_POS] != _LZ4_MAGIC:
        return bytes(out)
    flg = out[_LZ4_FLG_POS]
    hc_pos = (_LZ4_FLG_POS + 2 + (8 if flg & _LZ4_CONTENT_SIZE_FLAG else 0)
              + (4 if flg & _LZ4_DICT_ID_FLAG else 0))
    if len(out) <= hc_pos:
        return bytes(out)
    out[hc_pos] = (xxh32(out[from_pos:hc_pos]) >> 8) & 0xFF
    return bytes(out)


def xxh32(data: BytesLike, seed: int = 0) -> int:
    """XXH32 (the LZ4 frame's checksum), for the few header bytes HC covers; pure Python."""
    p1, p2, p3, p4, p5 = _XXH32_PRIMES
    view = memoryview(data).cast("B")
    n = len(view)
    pos = 0
    if n >= 16:
        lanes = [(seed + p1 + p2) & _U32, (seed + p2) & _U32, seed & _U32, (seed - p1) & _U32]
        while pos + 16 <= n:
            for i in range(4):
                word = int.from_bytes(view[pos:pos + 4], "little")
                lanes[i] = (_rotl32((lanes[i] + word * p2) & _U32, 13) * p1) & _U32
                pos += 4
        h = (_rotl32(lanes[0], 1) + _rotl32(lanes[1], 7) + _rotl32(lanes[2], 12)
             + _rotl32(lanes[3], 18)) & _U32
    else:
        h = (seed + p5) & _U32
    h = (h + n) & _U32
    while pos + 4 <= n:
        word = int.from_bytes(view[pos:pos + 4], "little")
        h = (_rotl32((h + word * p3) & _U32, 17) * p4) & _U32
        pos += 4
    while pos < n:
        h = (_rotl32((h + view[pos] * p5) & _U32, 11) * p1) & _U32
        pos += 1
    h ^= h >> 15
    h = (h * p2) & _U32
    h ^= h >> 13
    h = (h * p3) & _U32
    return h ^ (h >> 16)


def _rotl32(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & _U32
