"""What survives a broker restart, a kill -9 and retention, checked with stock clients against the
broker process and its data directory."""

from __future__ import annotations

import time
from typing import Any

import confluent_kafka
from clients import (
    ADMIN_TIMEOUT_S,
    CONSUME_TIMEOUT_S,
    Outgoing,
    by_partition,
    confluent_admin,
    consume_aiokafka,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    dense_offsets,
    expected_messages,
    make_records,
    new_topic_name,
    offsets_for_times_confluent,
    offsets_for_times_kafka_python,
    produce_confluent,
    read_batch_headers,
    segment_files,
    wait_until,
    watermarks_confluent,
    watermarks_kafka_python,
)

BEGINNING = confluent_kafka.OFFSET_BEGINNING
RETENTION_DEADLINE_S = 60.0


def test_clean_restart_keeps_every_record_at_its_offset(broker: Any) -> None:
    topic = new_topic_name("restart")
    create_topic(broker.bootstrap, topic, partitions=3)
    records = make_records(3_000, partitions=3)
    offsets = produce_confluent(broker.bootstrap, topic, records)
    assert offsets == dense_offsets(records)

    assert broker.stop() == 0
    # SIGTERM flushed and closed every log: the marker tells the next start to skip recovery.
    assert (broker.data_dir / ".kafka_cleanshutdown").exists()
    broker.start()

    expected = expected_messages(records, offsets)
    consumed = consume_kafka_python(broker.bootstrap, topic, {0: 0, 1: 0, 2: 0}, len(expected))
    assert by_partition(consumed) == by_partition(expected)
    for p in range(3):
        assert watermarks_confluent(broker.bootstrap, topic, p) == (0, 1_000)

    # The log takes appends after the restart at the next offsets.
    more = make_records(30, partitions=3, base_timestamp_ms=1_700_000_000_000)
    assert produce_confluent(broker.bootstrap, topic, more) == dense_offsets(
        more, {0: 1_000, 1: 1_000, 2: 1_000})


def test_multi_segment_log_survives_restart_and_time_lookup_spans_segments(
        broker_factory: Any) -> None:
    broker = broker_factory({"log.segment.bytes": "65536"})
    topic = new_topic_name("segments")
    create_topic(broker.bootstrap, topic, partitions=1)
    base_ms = 1_650_000_000_000
    # 4,000 records of ~200 bytes (~800 KB) in batches of about 100: a dozen segments.
    records = [Outgoing(0, r.key, r.value, r.headers, base_ms + 10 * i)
               for i, r in enumerate(make_records(4_000, value_size_bytes=150))]
    offsets: list[int] = []
    for start in range(0, len(records), 500):
        offsets += produce_confluent(broker.bootstrap, topic, records[start:start + 500],
                                     {"batch.size": 16_384})
    assert offsets == list(range(4_000))

    segments = segment_files(broker.data_dir, topic, 0)
    assert len(segments) >= 5, [s.name for s in segments]
    bases = [int(s.stem) for s in segments]
    assert bases[0] == 0 and bases == sorted(bases)
    for segment, base in zip(segments, bases, strict=True):
        headers = read_batch_headers(segment)
        assert headers[0].base_offset == base
        assert segment.stat().st_size <= 65_536 or len(headers) == 1

    assert broker.stop() == 0
    broker.start()
    assert [s.name for s in segment_files(broker.data_dir, topic, 0)] == [s.name for s in segments]

    expected = expected_messages(records, offsets)
    assert consume_confluent(broker.bootstrap, topic, {0: BEGINNING}, 4_000) == expected
    assert watermarks_kafka_python(broker.bootstrap, topic, 0) == (0, 4_000)

    # Look up the first record of several segments, one just inside, and one between records.
    probes = {bases[1]: bases[1], bases[2] + 1: bases[2] + 1, bases[-1]: bases[-1],
              bases[-1] - 1: bases[-1] - 1, 3_999: 3_999}
    for offset, want in probes.items():
        ts = base_ms + 10 * offset
        assert offsets_for_times_confluent(broker.bootstrap, topic, {0: ts}) == {0: want}
        assert offsets_for_times_kafka_python(broker.bootstrap, topic, {0: ts - 5}) == {0: want}
    assert offsets_for_times_confluent(broker.bootstrap, topic, {0: base_ms + 40_000}) == {0: -1}


def test_acknowledged_records_survive_kill_minus_nine_during_produce(broker: Any) -> None:
    topic = new_topic_name("kill9")
    create_topic(broker.bootstrap, topic, partitions=1)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap,
        "enable.idempotence": False,
        "acks": "all",
        "linger.ms": 2,
        "batch.num.messages": 50,
        "message.send.max.retries": 0,
        "message.timeout.ms": 10_000,
    })
    acked: dict[int, bytes] = {}  # offset -> value of each record whose report had no error
    failed: list[bytes] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            assert msg.offset() not in acked, f"offset {msg.offset()} acknowledged twice"
            acked[msg.offset()] = msg.value()
        else:
            failed.append(msg.value())

    sent = 0
    killed_at_acked = None
    deadline = time.monotonic() + CONSUME_TIMEOUT_S
    # Keep producing; once a few thousand are acknowledged, kill the broker with records in
    # flight, then keep producing a little into the dead broker.
    while time.monotonic() < deadline:
        try:
            producer.produce(topic, value=b"seq-%08d" % sent, partition=0,
                             on_delivery=on_delivery)
            sent += 1
        except BufferError:
            pass
        producer.poll(0)
        if killed_at_acked is None and len(acked) >= 3_000:
            broker.kill()
            killed_at_acked = len(acked)
        if killed_at_acked is not None and sent % 200 == 0:
            break
    assert killed_at_acked is not None, f"only {len(acked)} acknowledged before the deadline"
    producer.purge()
    producer.flush(10)  # delivers the purge/transport failures to on_delivery
    assert len(acked) >= killed_at_acked
    assert sent > len(acked), "no record was in flight when the broker died"

    broker.start()
    _, high = watermarks_confluent(broker.bootstrap, topic, 0)
    assert high >= len(acked)
    consumed = consume_confluent(broker.bootstrap, topic, {0: BEGINNING}, high)
    assert len(consumed) == high

    # The log is dense from 0 and holds no value twice.
    assert [m.offset for m in consumed] == list(range(high))
    values = [m.value for m in consumed]
    assert len(set(values)) == len(values)
    # Every acknowledged record is there, at its acknowledged offset; acknowledged offsets have
    # no holes; and records were stored in the order they were sent.
    assert sorted(acked) == list(range(len(acked)))
    for offset, value in acked.items():
        assert values[offset] == value, f"offset {offset}"
    assert values == sorted(values)


def test_retention_deletes_old_segments_and_moves_earliest_offset(broker_factory: Any) -> None:
    broker = broker_factory({"log.retention.check.interval.ms": "200",
                             "log.segment.delete.delay.ms": "0"})
    topic = new_topic_name("retention")
    # Retention starts only once the segments are listed: on a busy machine it would
    # otherwise delete some while the records are still being produced.
    create_topic(broker.bootstrap, topic, partitions=1,
                  config={"retention.ms": "-1", "segment.bytes": "16384"})
    now_ms = int(time.time() * 1000)
    # Old records (an hour ago) fill several segments; fresh ones (a minute ahead, inside
    # message.timestamp.after.max.ms) follow and must stay.
    old = [Outgoing(0, r.key, r.value, r.headers, now_ms - 3_600_000 + i)
           for i, r in enumerate(make_records(600, value_size_bytes=100))]
    fresh = [Outgoing(0, r.key, r.value, r.headers, now_ms + 60_000 + i)
             for i, r in enumerate(make_records(100, value_size_bytes=100))]
    offsets = produce_confluent(broker.bootstrap, topic, old, {"batch.num.messages": 20})
    offsets += produce_confluent(broker.bootstrap, topic, fresh, {"batch.num.messages": 20})
    assert offsets == list(range(700))
    first_segments = segment_files(broker.data_dir, topic, 0)
    bases = [int(s.stem) for s in first_segments]
    assert len(bases) >= 3
    # Every segment before the one holding offset 600 has only old records and must go; that
    # one has a fresh record, so its largest timestamp is fresh and it stays.
    expected_low = max(b for b in bases if b <= 600)
    assert expected_low > 0
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    resource = confluent_kafka.admin.ConfigResource(
        confluent_kafka.admin.ResourceType.TOPIC, topic, incremental_configs=[
            confluent_kafka.admin.ConfigEntry(
                "retention.ms", "2000",
                incremental_operation=confluent_kafka.admin.AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)

    def earliest() -> bool:
        return watermarks_confluent(broker.bootstrap, topic, 0)[0] == expected_low

    wait_until(earliest, RETENTION_DEADLINE_S, f"earliest offset to move to {expected_low}")
    low = expected_low
    remaining = segment_files(broker.data_dir, topic, 0)
    assert [int(s.stem) for s in remaining] == [b for b in bases if b >= low]
    wait_until(lambda: not [p for p in (broker.data_dir / f"{topic}-0").iterdir()
                            if p.name.endswith(".deleted")],
               RETENTION_DEADLINE_S, ".deleted files to be removed")

    expected = expected_messages(old + fresh, offsets)[low:]
    consumed = consume_aiokafka(broker.bootstrap, topic, {0: BEGINNING}, len(expected))
    assert consumed == expected
    assert watermarks_confluent(broker.bootstrap, topic, 0) == (low, 700)


def test_deleted_records_stay_deleted_after_clean_restart(broker: Any) -> None:
    topic = new_topic_name("delete-restart")
    create_topic(broker.bootstrap, topic, partitions=1)
    records = make_records(500)
    expected = expected_messages(records, produce_confluent(broker.bootstrap, topic, records))
    admin = confluent_admin(broker.bootstrap)
    futures = admin.delete_records([confluent_kafka.TopicPartition(topic, 0, 321)],
                                   request_timeout=ADMIN_TIMEOUT_S)
    assert futures[confluent_kafka.TopicPartition(topic, 0)].result().low_watermark == 321

    assert broker.stop() == 0
    broker.start()

    assert watermarks_confluent(broker.bootstrap, topic, 0) == (321, 500)
    assert consume_kafka_python(broker.bootstrap, topic, {0: BEGINNING}, 179) == expected[321:]


def test_kill_minus_nine_after_multi_segment_produce_recovers_log_and_time_index(
        broker_factory: Any) -> None:
    broker = broker_factory({"log.segment.bytes": "32768"})
    topic = new_topic_name("kill9-segments")
    create_topic(broker.bootstrap, topic, partitions=2)
    base_ms = 1_650_000_000_000
    records = [Outgoing(i % 2, r.key, r.value, r.headers, base_ms + 10 * i)
               for i, r in enumerate(make_records(3_000, value_size_bytes=100))]
    offsets = produce_confluent(broker.bootstrap, topic, records,
                                {"acks": "all", "batch.num.messages": 50})
    segments = segment_files(broker.data_dir, topic, 0)
    assert len(segments) >= 3

    broker.kill()
    broker.start()

    expected = expected_messages(records, offsets)
    consumed = consume_aiokafka(broker.bootstrap, topic, {0: 0, 1: 0}, 3_000)
    assert by_partition(consumed) == by_partition(expected)
    assert [s.name for s in segment_files(broker.data_dir, topic, 0)] == [s.name for s in segments]
    # Record i is at offset i // 2 of partition i % 2 with timestamp base + 10 i.
    for i in (0, 1, 777, 1_500, 2_998, 2_999):
        want = {i % 2: i // 2}
        assert offsets_for_times_confluent(
            broker.bootstrap, topic, {i % 2: base_ms + 10 * i}) == want
    # Appends continue at the next offsets.
    more = make_records(4, partitions=2, base_timestamp_ms=base_ms + 100_000)
    assert produce_confluent(broker.bootstrap, topic, more) == [1_500, 1_500, 1_501, 1_501]


def test_torn_tail_written_while_down_is_truncated_and_appends_continue(broker: Any) -> None:
    """A crash mid-write leaves half a batch at the end of the active segment: the next start
    truncates it, serves every whole batch, and appends at the next offset."""
    topic = new_topic_name("torn")
    create_topic(broker.bootstrap, topic, partitions=1)
    records = make_records(500, partitions=1)
    offsets = produce_confluent(broker.bootstrap, topic, records)
    broker.kill()

    active = segment_files(broker.data_dir, topic, 0)[-1]
    whole_size = active.stat().st_size
    last_batch = read_batch_headers(active)[-1]
    with active.open("ab") as log_file:  # a batch header that promises more than follows
        log_file.write((last_batch.last_offset + 1).to_bytes(8, "big") + (4096).to_bytes(4, "big")
                       + b"\x00" * 40)

    broker.start()
    assert active.stat().st_size == whole_size
    consumed = consume_confluent(broker.bootstrap, topic, {0: BEGINNING}, len(records))
    assert by_partition(consumed) == by_partition(expected_messages(records, offsets))
    more = make_records(10, partitions=1)
    assert produce_confluent(broker.bootstrap, topic, more) == dense_offsets(more, {0: 500})
