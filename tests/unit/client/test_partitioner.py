"""Kafka's default partitioner, ours: murmur2 bit for bit, sticky without a key, and partition
reduction's rule that only writable partitions are chosen."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kafka_ext.client.partitioner import StickyPartitioner, murmur2, partition_for_key, to_positive

# Apache Kafka's UtilsTest.testMurmur2 reference values.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_matches_kafkas_reference_values() -> None:
    assert {key: murmur2(key) for key in JAVA_MURMUR2} == JAVA_MURMUR2


@given(st.binary(max_size=64))
def test_murmur2_agrees_with_kafka_python(key: bytes) -> None:
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(bytearray(key)) & 0xFFFFFFFF


def test_keyed_record_goes_where_javas_producer_puts_it() -> None:
    for key in JAVA_MURMUR2:
        assert partition_for_key(key, range(7)) == to_positive(murmur2(key)) % 7


def test_keys_map_only_into_writable_partitions() -> None:
    writable = [0, 1, 2]  # 3 of 5 partitions take writes: a reduction to 3 is under way
    for i in range(200):
        key = b"key-%d" % i
        assert partition_for_key(key, writable) == to_positive(murmur2(key)) % 3


def test_sticky_partitioner_stays_until_a_batch_worth_then_moves() -> None:
    sticky = StickyPartitioner(batch_size_bytes=100, rng=random.Random(7))
    first = [sticky.partition("t", [0, 1, 2], 30) for _ in range(4)]
    assert len(set(first)) == 1  # 0, 30, 60, 90 bytes before: under 100
    assert sticky.partition("t", [0, 1, 2], 30) != first[0]  # 120 bytes went there


def test_sticky_partitioner_leaves_a_partition_that_stopped_taking_writes() -> None:
    sticky = StickyPartitioner(batch_size_bytes=10_000, rng=random.Random(1))
    current = sticky.partition("t", [0, 1, 2], 10)
    others = [p for p in (0, 1, 2) if p != current]
    assert sticky.partition("t", others, 10) in others
