"""`kafka-ext verifiable-producer`: Kafka's VerifiableProducer, whose JSON event lines Kafka's
system tests (and ours) parse to know which records were acknowledged.

Produces the increasing integers 0, 1, 2, ... (`--value-prefix P`: "P.0", "P.1", ...; with
`--repeating-keys N` keys "0".."N-1" over and over, else none) to `--topic`, at most
`--max-messages` (-1: until stopped) and about `--throughput` a second (-1: as fast as it can),
with `--acks` (-1, 0 or 1) and no retries. Prints one JSON object a line, its fields in Kafka's
order: `startup_complete`; `producer_send_success` (key, value, topic, partition, offset) or
`producer_send_error` (key, value, topic, exception, message) for every record; then, when done
or on SIGTERM / SIGINT, `shutdown_complete` and `tool_data` (sent, acked, target_throughput,
avg_throughput). The producer is confluent-kafka's; `--command-config` (or the deprecated
`--producer.config`) holds Java client properties.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

from confluent_kafka import KafkaError, Producer

from kafka_ext.cli.java_errors import java_exception
from kafka_ext.cli.perf_tools import client_settings, new_client


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "verifiable-producer", help="produce integers, printing each ack as JSON",
        description="This tool produces increasing integers to the specified topic and prints "
                    "JSON metadata to stdout on each \"send\" request, making externally "
                    "visible which messages have been acked and which have not.")
    parser.add_argument("--topic", required=True, metavar="TOPIC")
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST1:PORT1[,HOST2:PORT2]")
    parser.add_argument("--max-messages", type=int, default=-1, metavar="MAX-MESSAGES")
    parser.add_argument("--throughput", type=int, default=-1, metavar="THROUGHPUT")
    parser.add_argument("--acks", type=int, default=-1, choices=(0, 1, -1), metavar="ACKS")
    parser.add_argument("--producer.config", dest="producer_config", metavar="CONFIG-FILE")
    parser.add_argument("--message-create-time", type=int, default=-1, dest="create_time",
                        metavar="CREATE-TIME")
    parser.add_argument("--value-prefix", type=int, metavar="VALUE-PREFIX")
    parser.add_argument("--repeating-keys", type=int, metavar="REPEATING-KEYS")
    parser.add_argument("--command-config", metavar="CONFIG-FILE")
    parser.set_defaults(run=run)


def event(name: str, **fields: Any) -> str:
    """One line: timestamp and name first, then the fields in order, compact as Jackson."""
    return json.dumps({"timestamp": int(time.time() * 1000), "name": name, **fields},
                      separators=(",", ":"))


class VerifiableProducer:
    def __init__(self, args: argparse.Namespace) -> None:
        self.topic = args.topic
        self.value_prefix = args.value_prefix
        self.repeating_keys = args.repeating_keys
        self.create_time = args.create_time if args.create_time >= 0 else None
        self.throughput = args.throughput
        self.max_messages = args.max_messages
        config = args.command_config or args.producer_config
        settings = {**client_settings(config, [], "--command-config"),
                    "bootstrap.servers": args.bootstrap_server,
                    "acks": str(args.acks), "retries": 0, "enable.idempotence": False}
        self.producer = new_client(Producer, settings)
        self.sent = self.acked = 0
        self.key_counter = 0
        self.stopping = False
        self.start_ms = time.time() * 1000

    def key(self) -> str | None:
        if self.repeating_keys is None:
            return None
        key = str(self.key_counter)
        self.key_counter = (self.key_counter + 1) % self.repeating_keys
        return key

    def value(self, i: int) -> str:
        return f"{self.value_prefix}.{i}" if self.value_prefix is not None else str(i)

    def send(self, key: str | None, value: str) -> None:
        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                self.acked += 1
                print(event("producer_send_success", key=key, value=value, topic=msg.topic(),
                            partition=msg.partition(), offset=msg.offset()), flush=True)
            else:
                print(_failed(key, value, self.topic, err), flush=True)
        self.sent += 1
        extra = {} if self.create_time is None else {"timestamp": self.create_time}
        try:
            self.producer.produce(self.topic, key=key, value=value, on_delivery=delivered,
                                  **extra)
        except BufferError as exc:
            print(event("producer_send_error", key=key, value=value, topic=self.topic,
                        exception="class org.apache.kafka.common.errors.TimeoutException",
                        message=str(exc)), flush=True)
        if self.create_time is not None:
            self.create_time += int(time.time() * 1000 - self.start_ms)
        self.producer.poll(0)

    def run(self) -> None:
        print(event("startup_complete"), flush=True)
        limit = self.max_messages if self.max_messages >= 0 else None
        i = 0
        while not self.stopping and (limit is None or i < limit):
            self.send(self.key(), self.value(i))
            i += 1
            if self.throughput > 0:  # Kafka's ThroughputThrottler: stay at the target rate
                ahead_s = i / self.throughput - (time.time() * 1000 - self.start_ms) / 1000
                if ahead_s > 0:
                    time.sleep(ahead_s)

    def close(self) -> None:
        self.producer.flush()
        print(event("shutdown_complete"), flush=True)
        elapsed_ms = max(time.time() * 1000 - self.start_ms, 1)
        print(event("tool_data", sent=self.sent, acked=self.acked,
                    target_throughput=self.throughput,
                    avg_throughput=1000 * self.acked / elapsed_ms), flush=True)


def _failed(key: str | None, value: str, topic: str, err: KafkaError) -> str:
    return event("producer_send_error", key=key, value=value, topic=topic,
                 exception=f"class {java_exception(err.name().lstrip('_'))}", message=err.str())


def run(args: argparse.Namespace) -> int:
    producer = VerifiableProducer(args)

    def stop(signum: int, frame: Any) -> None:
        producer.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        producer.run()
    finally:
        producer.close()
        sys.stdout.flush()
    return 0
