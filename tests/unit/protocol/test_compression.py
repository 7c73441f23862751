"""Record codecs: round trips, the wire forms stock clients write, and bounded inflation."""

from __future__ import annotations

import gzip
import os
import struct

import cramjam
import lz4.frame  # type: ignore[import-untyped]
import pytest
import zstandard
from aiokafka import codec as aiokafka_codec  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st

from kafka_ext.protocol.compression import compress, decompress
from kafka_ext.protocol.errors import DecodeError, ErrorCode
from kafka_ext.protocol.record_batch import Compression

CODECS = list(Compression)
COMPRESSED = [codec for codec in Compression if codec != Compression.NONE]
XERIAL_MAGIC = b"\x82SNAPPY\x00"


@settings(max_examples=40, deadline=None)
@given(codec=st.sampled_from(CODECS), data=st.binary(max_size=5_000), repeat=st.integers(1, 40))
def test_round_trip_every_codec(codec: Compression, data: bytes, repeat: int) -> None:
    payload = data * repeat
    assert decompress(codec, compress(codec, payload)) == payload


@pytest.mark.parametrize("codec", COMPRESSED)
def test_round_trip_accepts_memoryview_and_levels(codec: Compression) -> None:
    payload = b"kafka " * 20_000 + os.urandom(3_000)
    level = {Compression.GZIP: 9, Compression.SNAPPY: None, Compression.LZ4: 9, Compression.ZSTD: 10}[codec]
    packed = compress(codec, memoryview(payload), level=level)
    assert len(packed) < len(payload)
    assert decompress(codec, memoryview(packed)) == payload


def test_snappy_writes_xerial_blocks_of_32_kib() -> None:
    payload = os.urandom(70_000)
    packed = compress(Compression.SNAPPY, payload)
    assert packed[:8] == XERIAL_MAGIC
    assert struct.unpack_from(">ii", packed, 8) == (1, 1)
    pos, blocks = 16, []
    while pos < len(packed):
        (length,) = struct.unpack_from(">i", packed, pos)
        blocks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + length])))
        pos += 4 + length
    assert [len(block) for block in blocks] == [32_768, 32_768, 70_000 - 65_536]
    assert b"".join(blocks) == payload


def test_snappy_reads_raw_snappy() -> None:
    payload = b"librdkafka " * 1_000
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(payload))) == payload


def test_snappy_reads_another_clients_xerial_framing() -> None:
    payload = b"java-style " * 10_000
    packed = aiokafka_codec.snappy_encode(payload, xerial_compatible=True, xerial_blocksize=4_096)
    assert packed[:8] == XERIAL_MAGIC
    assert decompress(Compression.SNAPPY, packed) == payload


def test_lz4_writes_the_frame_java_writes() -> None:
    packed = compress(Compression.LZ4, b"x" * 1_000)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic 0x184D2204
    # FLG: version 01, independent blocks, no block checksum, no content size or checksum.
    assert packed[4] == 0x60
    assert packed[5] == 0x40  # BD: 64 KiB maximum block size


def test_lz4_reads_frames_with_content_size_and_checksums() -> None:
    payload = b"librdkafka lz4 " * 5_000
    packed = lz4.frame.compress(payload, store_size=True, content_checksum=True, block_linked=True)
    assert decompress(Compression.LZ4, packed) == payload


def test_zstd_reads_frames_without_content_size() -> None:
    payload = b"zstd-jni " * 50_000
    packed = zstandard.ZstdCompressor(write_content_size=False).compress(payload)
    assert zstandard.get_frame_parameters(packed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(Compression.ZSTD, packed) == payload


def test_zstd_reads_streamed_frames_back_to_back() -> None:
    compressor = zstandard.ZstdCompressor(write_checksum=True)
    chunks = [os.urandom(1_000) + b"a" * 200_000, b"second frame"]
    packed = b"".join(_stream_frame(compressor, chunk) for chunk in chunks)
    assert decompress(Compression.ZSTD, packed) == b"".join(chunks)


def _stream_frame(compressor: zstandard.ZstdCompressor, chunk: bytes) -> bytes:
    writer = compressor.compressobj()
    return writer.compress(chunk) + writer.flush()


def test_gzip_reads_members_back_to_back() -> None:
    packed = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decompress(Compression.GZIP, packed) == b"first second"


@pytest.mark.parametrize("codec", CODECS)
def test_output_past_max_bytes_is_corrupt_message(codec: Compression) -> None:
    payload = b"\x00" * 1_000_000
    packed = compress(codec, payload)
    with pytest.raises(DecodeError) as info:
        decompress(codec, packed, max_bytes=100_000)
    assert info.value.code == ErrorCode.CORRUPT_MESSAGE
    assert decompress(codec, packed, max_bytes=len(payload)) == payload


def test_zstd_bomb_without_content_size_is_stopped_early() -> None:
    bomb = zstandard.ZstdCompressor(write_content_size=False).compress(b"\x00" * 50_000_000)
    assert len(bomb) < 10_000
    with pytest.raises(DecodeError):
        decompress(Compression.ZSTD, bomb, max_bytes=1_000_000)


def test_snappy_block_declaring_too_much_is_refused() -> None:
    # A raw snappy block announces its size first: refuse it before inflating.
    block = bytes(cramjam.snappy.compress_raw(b"\x00" * 2_000_000))
    with pytest.raises(DecodeError):
        decompress(Compression.SNAPPY, block, max_bytes=1_000)


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_input_is_decode_error(codec: Compression) -> None:
    packed = compress(codec, os.urandom(2_000) + b"z" * 100_000)
    for cut in (1, 3, len(packed) // 2, len(packed) - 1):
        with pytest.raises(DecodeError):
            decompress(codec, packed[:-cut])


@pytest.mark.parametrize("codec", COMPRESSED)
def test_trailing_garbage_is_decode_error(codec: Compression) -> None:
    packed = compress(codec, b"payload " * 100)
    with pytest.raises(DecodeError):
        decompress(codec, packed + b"\x01\x02\x03\x04\x05\x06\x07\x08\x09")


@settings(max_examples=300, deadline=None)
@given(codec=st.sampled_from(COMPRESSED), data=st.binary(max_size=200), magic_prefix=st.booleans())
def test_random_bytes_raise_only_decode_error(codec: Compression, data: bytes, magic_prefix: bool) -> None:
    prefix = {
        Compression.GZIP: b"\x1f\x8b\x08\x00",
        Compression.SNAPPY: XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01",
        Compression.LZ4: b"\x04\x22\x4d\x18",
        Compression.ZSTD: b"\x28\xb5\x2f\xfd",
    }[codec]
    try:
        out = decompress(codec, (prefix if magic_prefix else b"") + data, max_bytes=1 << 20)
    except DecodeError:
        return
    assert len(out) <= 1 << 20
