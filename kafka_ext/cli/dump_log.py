"""`kafka-ext dump-log`: kafka-dump-log.sh (Kafka's DumpLogSegments) over our files.

`--files a,b,..` names segment files (`.log`), KRaft snapshots (`.checkpoint`, and a log dir's
`bootstrap.checkpoint`), offset indexes (`.index`), time indexes (`.timeindex`), producer state
snapshots (`.snapshot`) and aborted-transaction indexes (`.txnindex`); each is printed in Kafka's
layout after a "Dumping <file>" line: one line per batch (baseOffset .. isvalid), with
`--deep-iteration` one "| offset: .." line per record, with `--print-data-log` (or any decoder
flag) its key and payload through the parsers of `dump_log_parsers.py`. Index entries are
checked against the segment (`--verify-index-only` prints only the problems, on stderr, after
every file; `--index-sanity-check` runs the broker's start-up check). Files are only read (an
active segment of a running broker can be dumped): batches and records are decoded with
`protocol/record_batch.py` and `records.py`, snapshots with `controller/snapshot.py`'s framing,
producer snapshots and transaction indexes with their `storage/` decoders.

Exit code 1 when a file cannot be read or a record cannot be decoded (Kafka's tool stops there
too). One departure: with `--skip-record-metadata` a control record prints nothing, where Kafka's
tool prints an empty line.
"""

from __future__ import annotations

import argparse
import bisect
import mmap
import os
import re
import struct
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from kafka_ext.cli.dump_log_parsers import (
    DECODERS,
    DEFAULT_DECODER,
    ClusterMetadataParser,
    DecoderParser,
    OffsetsParser,
    ParseError,
    RecordParser,
    ShareGroupStateParser,
    TransactionLogParser,
    control_record_text,
)
from kafka_ext.controller.snapshot import SNAPSHOT_SUFFIX
from kafka_ext.protocol.errors import DecodeError, KafkaError
from kafka_ext.protocol.record_batch import (
    COMPRESSION_MASK,
    CURRENT_MAGIC,
    NO_SEQUENCE,
    BatchHeader,
    TimestampType,
    compute_crc,
    iter_batch_headers,
)
from kafka_ext.protocol.records import Record, decode_records
from kafka_ext.storage.formatter import BOOTSTRAP_CHECKPOINT
from kafka_ext.storage.offset_index import OffsetIndex
from kafka_ext.storage.producer_state import SNAPSHOT_SUFFIX as PRODUCER_SNAPSHOT_SUFFIX
from kafka_ext.storage.producer_state import decode_snapshot
from kafka_ext.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX
from kafka_ext.storage.time_index import TimeIndex
from kafka_ext.storage.transaction_index import (
    ABORTED_TXN_VERSION,
    TXN_INDEX_SUFFIX,
    decode_aborted_txns,
)

INT_MAX = 2**31 - 1  # --max-bytes default: Kafka reads the whole file and reports trailing bytes
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024
RECORD_INDENT = "|"
MAX_SEQUENCE = 1 << 31  # record sequences wrap here, as producers wrap them

# The entry layouts of OffsetIndex and TimeIndex files. Read here without those classes: they
# open the file read-write and trim a preallocated (active) index when closed.
_OFFSET_ENTRY = struct.Struct(
    ">"
    "i"  # relative offset: the indexed batch's last offset - segment base offset
    "i"  # position: byte position of that batch in the .log file
)
_TIME_ENTRY = struct.Struct(
    ">"
    "q"  # timestamp in ms: the segment's largest batch max timestamp so far
    "i"  # relative offset: last offset of the batch with that timestamp - base offset
)
assert _OFFSET_ENTRY.size == OffsetIndex.entry_size and _TIME_ENTRY.size == TimeIndex.entry_size

_SNAPSHOT_NAME = re.compile(r"^([0-9]{20})-([0-9]{10})\.checkpoint$")
_TIMESTAMP_TYPE_NAMES = {TimestampType.CREATE_TIME: "CreateTime",
                         TimestampType.LOG_APPEND_TIME: "LogAppendTime"}


class DumpError(Exception):
    """A file that cannot be read or decoded: printed on stderr, exit code 1."""


@dataclass(frozen=True, slots=True)
class DumpOptions:
    """The flags that shape the output, once parsed."""

    print_data_log: bool
    deep_iteration: bool
    skip_record_metadata: bool
    max_bytes: int
    max_message_size: int
    index_sanity_only: bool
    verify_only: bool
    parser: RecordParser


@dataclass(slots=True)
class DumpReport:
    """Problems found while dumping, printed on stderr after every file (as Kafka's tool)."""

    index_mismatches: dict[str, dict[int, int]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_offsets_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def write(self, err: TextIO) -> None:
        for name, mismatches in self.index_mismatches.items():
            print(f"Mismatches in :{name}", file=err)
            for index_offset, log_offset in sorted(mismatches.items(), reverse=True):
                print(f"  Index offset: {index_offset}, log offset: {log_offset}", file=err)
        for name, pairs in self.time_mismatches.items():
            print(f"Found timestamp mismatch in :{name}", file=err)
            for index_ts, log_ts in pairs:
                print(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}", file=err)
        for name, pairs in self.time_out_of_order.items():
            print(f"Found out of order timestamp in :{name}", file=err)
            for index_ts, previous_ts in pairs:
                print(f"  Index timestamp: {index_ts}, Previously indexed timestamp: "
                      f"{previous_ts}", file=err)
        for pairs in self.time_offsets_not_found.values():
            print("The following indexed offsets are not found in the log.", file=err)
            for index_offset, log_offset in pairs:
                print(f"Indexed offset: {index_offset}, found log offset: {log_offset}", file=err)
        for name, pairs in self.non_consecutive.items():
            print(f"Non-consecutive offsets in {name}", file=err)
            for first, second in pairs:
                print(f"  {first} is followed by {second}", file=err)


@dataclass(slots=True)
class OffsetGaps:
    """Notes, for the report, records of one file whose offset does not follow the previous
    record's (compaction's gaps, or damage)."""

    file_name: str
    report: DumpReport
    last_offset: int | None = None

    def see(self, offset: int) -> None:
        if self.last_offset is not None and offset != self.last_offset + 1:
            self.report.non_consecutive.setdefault(self.file_name, []).append(
                (self.last_offset, offset))
        self.last_offset = offset


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `dump-log` with kafka-dump-log.sh's flags."""
    parser = subparsers.add_parser(
        "dump-log", help="print the contents of log segments, indexes and snapshots "
                         "(kafka-dump-log.sh)",
        description="Print log segments, KRaft snapshots, offset and time indexes, producer "
                    "snapshots and transaction indexes batch by batch and record by record, "
                    "and check indexes against their segment.")
    parser.add_argument("--files", required=True, metavar="FILE1,FILE2,..",
                        help="the files to print, comma-separated")
    parser.add_argument("--print-data-log", action="store_true",
                        help="print the records' keys and values (set by any decoder flag)")
    parser.add_argument("--deep-iteration", action="store_true",
                        help="print every record, not only batches (set by --print-data-log)")
    parser.add_argument("--skip-record-metadata", action="store_true",
                        help="print only the key and payload of each record")
    parser.add_argument("--verify-index-only", action="store_true",
                        help="check index entries against the log without printing them")
    parser.add_argument("--index-sanity-check", action="store_true",
                        help="only run the sanity check the broker runs on indexes at start-up")
    parser.add_argument("--max-bytes", type=int, default=INT_MAX, metavar="SIZE",
                        help="read at most this many bytes of each .log file")
    parser.add_argument("--max-message-size", type=int, default=DEFAULT_MAX_MESSAGE_SIZE,
                        metavar="SIZE", help="size of the largest batch (index verification)")
    parser.add_argument("--key-decoder-class", nargs="?", const=DEFAULT_DECODER,
                        choices=sorted(DECODERS), metavar="CLASS",
                        help="decoder of keys (Kafka's String, Integer or Long Decoder)")
    parser.add_argument("--value-decoder-class", nargs="?", const=DEFAULT_DECODER,
                        choices=sorted(DECODERS), metavar="CLASS",
                        help="decoder of values (Kafka's String, Integer or Long Decoder)")
    parser.add_argument("--offsets-decoder", action="store_true",
                        help="decode records as __consumer_offsets data")
    parser.add_argument("--transaction-log-decoder", action="store_true",
                        help="decode records as __transaction_state data")
    parser.add_argument("--cluster-metadata-decoder", action="store_true",
                        help="decode records as __cluster_metadata records")
    parser.add_argument("--share-group-state-decoder", action="store_true",
                        help="decode records as __share_group_state data")
    parser.set_defaults(run=run)


def options_from(args: argparse.Namespace) -> DumpOptions:
    """The decoder flags pick the parser in Kafka's order of precedence; any of them prints
    the data, and printing the data iterates records."""
    parser: RecordParser
    if args.offsets_decoder:
        parser = OffsetsParser()
    elif args.transaction_log_decoder:
        parser = TransactionLogParser()
    elif args.cluster_metadata_decoder:
        parser = ClusterMetadataParser()
    elif args.share_group_state_decoder:
        parser = ShareGroupStateParser()
    else:
        parser = DecoderParser(DECODERS[args.key_decoder_class or DEFAULT_DECODER],
                               DECODERS[args.value_decoder_class or DEFAULT_DECODER])
    print_data_log = (args.print_data_log or args.offsets_decoder or args.transaction_log_decoder
                      or args.cluster_metadata_decoder or args.share_group_state_decoder
                      or args.key_decoder_class is not None
                      or args.value_decoder_class is not None)
    return DumpOptions(
        print_data_log=print_data_log,
        deep_iteration=args.deep_iteration or print_data_log,
        skip_record_metadata=args.skip_record_metadata,
        max_bytes=args.max_bytes,
        max_message_size=args.max_message_size,
        index_sanity_only=args.index_sanity_check,
        verify_only=args.verify_index_only,
        parser=parser,
    )


def run(args: argparse.Namespace) -> int:
    options = options_from(args)
    report = DumpReport()
    out = sys.stdout
    try:
        for name in args.files.split(","):
            dump_file(name, options, report, out)
    except BrokenPipeError:  # `dump-log ... | head`: the reader is gone, nothing to report
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (DumpError, ParseError) as exc:
        out.flush()
        print(exc, file=sys.stderr)
        return 1
    out.flush()
    report.write(sys.stderr)
    return 0


def dump_file(name: str, options: DumpOptions, report: DumpReport, out: TextIO) -> None:
    """Print one file in Kafka's layout for its suffix."""
    path = Path(name)
    print(f"Dumping {name}", file=out)
    suffix = path.name[path.name.rfind("."):] if "." in path.name else ""
    try:
        if suffix in (LOG_SUFFIX, SNAPSHOT_SUFFIX):
            dump_log(path, options, report, out)
        elif suffix == INDEX_SUFFIX:
            dump_offset_index(path, options, report, out)
        elif suffix == TIME_INDEX_SUFFIX:
            dump_time_index(path, options, report, out)
        elif suffix == PRODUCER_SNAPSHOT_SUFFIX:
            dump_producer_snapshot(path, out)
        elif suffix == TXN_INDEX_SUFFIX:
            dump_txn_index(path, out)
        else:
            print(f"Ignoring unknown file {name}", file=sys.stderr)
    except BrokenPipeError:
        raise  # stdout, not the file: run() ends quietly
    except OSError as exc:
        raise DumpError(f"{exc.strerror or exc}: {exc.filename or name}") from None


@contextmanager
def _mapped(path: Path) -> Iterator[memoryview]:
    """The file's bytes, mapped read-only (a segment may be a gigabyte)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield memoryview(b"")
            return
        mapped = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
        view = memoryview(mapped)
        try:
            yield view
        finally:
            view.release()
            try:
                mapped.close()
            except BufferError:  # an error left a reader's view open: the map goes with it
                pass


def _base_offset(path: Path) -> int:
    """The base offset a segment file's name carries (Kafka's `offsetFromFile`)."""
    try:
        return int(path.name.split(".")[0])
    except ValueError:
        raise DumpError(f"{path} is not named after a base offset") from None


# -- segments and snapshots ------------------------------------------------------------------------


def dump_log(path: Path, options: DumpOptions, report: DumpReport, out: TextIO) -> None:
    """Kafka's dumpLog: the batches of a segment or snapshot file, their records on request."""
    if path.name.endswith(LOG_SUFFIX):
        print(f"Log starting offset: {_base_offset(path)}", file=out)
    elif path.name == BOOTSTRAP_CHECKPOINT:
        print("KRaft bootstrap snapshot", file=out)
    else:
        parsed = _SNAPSHOT_NAME.match(path.name)
        if parsed is None:
            raise DumpError(f"{path} is not a snapshot file name (<offset>-<epoch>.checkpoint)")
        print(f"Snapshot end offset: {int(parsed[1])}, epoch: {int(parsed[2])}", file=out)
    gaps = OffsetGaps(str(path.absolute()), report)
    with _mapped(path) as data:
        end = min(len(data), options.max_bytes)
        valid_bytes = 0
        for position, header in iter_batch_headers(data, 0, end):
            print(batch_line(data, position, header), file=out)
            if options.deep_iteration:
                for line in record_lines(data, position, header, options, gaps, path):
                    print(line, file=out)
            valid_bytes = position + header.size_bytes
        trailing = end - valid_bytes
    if trailing > 0 and options.max_bytes == INT_MAX:
        print(f"Found {trailing} invalid bytes at the end of {path.name}", file=out)


def batch_line(data: memoryview, position: int, header: BatchHeader) -> str:
    """Kafka's printBatchLevel line of one v2 batch."""
    valid = header.magic == CURRENT_MAGIC and \
        header.crc == compute_crc(data, position, header.size_bytes)
    horizon = f"OptionalLong[{header.base_timestamp}]" if header.has_delete_horizon \
        else "OptionalLong.empty"
    try:
        codec = header.compression.name.lower()
    except KafkaError:  # codec ids 5-7: not Kafka's
        codec = f"unknown({header.attributes & COMPRESSION_MASK})"
    return (f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
            f"count: {header.records_count} baseSequence: {header.base_sequence} "
            f"lastSequence: {header.last_sequence} producerId: {header.producer_id} "
            f"producerEpoch: {header.producer_epoch} "
            f"partitionLeaderEpoch: {header.partition_leader_epoch} "
            f"isTransactional: {_java(header.is_transactional)} "
            f"isControl: {_java(header.is_control)} deleteHorizonMs: {horizon} "
            f"position: {position} {_TIMESTAMP_TYPE_NAMES[header.timestamp_type]}: "
            f"{header.max_timestamp} size: {header.size_bytes} magic: {header.magic} "
            f"compresscodec: {codec} crc: {header.crc} isvalid: {_java(valid)}")


def record_lines(data: memoryview, position: int, header: BatchHeader, options: DumpOptions,
                 gaps: OffsetGaps, path: Path) -> Iterator[str]:
    """Kafka's per-record lines of one batch (`| offset: ..`), noting offset gaps."""
    try:
        _, records = decode_records(data, position, verify_crc=False)
    except DecodeError as exc:
        raise DumpError(f"cannot decode the records of the batch at position {position} of "
                        f"{path}: {exc}") from None
    time_name = _TIMESTAMP_TYPE_NAMES[header.timestamp_type]
    for record in records:
        gaps.see(record.offset)
        line = ""
        if not options.skip_record_metadata:
            line = record_metadata(record, header, time_name)
        elif header.is_control:
            continue  # Kafka prints an empty line here; nothing is clearer
        if options.print_data_log and not header.is_control:
            line += record_contents(options.parser, record,
                                    RECORD_INDENT + " " if options.skip_record_metadata else " ")
        yield line


def record_metadata(record: Record, header: BatchHeader, time_name: str) -> str:
    """`| offset: .. CreateTime: .. keySize: .. valueSize: .. sequence: .. headerKeys: [..]`
    and, for a control record, what it says."""
    sequence = NO_SEQUENCE if header.base_sequence == NO_SEQUENCE else \
        (header.base_sequence + record.offset - header.base_offset) % MAX_SEQUENCE
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    header_keys = ",".join(key for key, _ in record.headers)
    line = (f"{RECORD_INDENT} offset: {record.offset} {time_name}: {record.timestamp} "
            f"keySize: {key_size} valueSize: {value_size} sequence: {sequence} "
            f"headerKeys: [{header_keys}]")
    if header.is_control:
        line += control_record_text(record)
    return line


def record_contents(parser: RecordParser, record: Record, prefix: str) -> str:
    """` key: .. payload: ..` through the chosen parser; a missing part is left out."""
    key, payload = parser.parse(record)
    text = ""
    if key is not None:
        text += f"{prefix}key: {key}"
        prefix = " "
    if payload is not None:
        text += f"{prefix}payload: {payload}"
    return text


def _java(flag: bool) -> str:
    return "true" if flag else "false"


# -- indexes ---------------------------------------------------------------------------------------


def _used_entries(data: memoryview, entry: struct.Struct) -> int:
    """Entries in an index file: all of a trimmed one, the non-zero prefix of a preallocated
    (active) one, as the broker counts them when it opens the file."""
    slots = len(data) // entry.size
    zero = bytes(entry.size)
    lo, hi = 0, slots  # the first empty slot is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if data[mid * entry.size:(mid + 1) * entry.size] == zero:
            hi = mid
        else:
            lo = mid + 1
    return lo


def _first_batch_at(log: memoryview, position: int, max_size: int) -> BatchHeader | None:
    for _, header in iter_batch_headers(log, position, position + max_size):
        return header
    return None


def dump_offset_index(path: Path, options: DumpOptions, report: DumpReport,
                      out: TextIO) -> None:
    """Kafka's dumpIndex: `offset: N position: P` per entry, each checked against the batch
    the segment holds at that position."""
    base_offset = _base_offset(path)
    log_path = path.with_name(path.name.split(".")[0] + LOG_SUFFIX)
    with _mapped(path) as index, _mapped(log_path) as log:
        entries = _used_entries(index, _OFFSET_ENTRY)
        if entries == 0:
            print(f"{path} is empty.", file=out)
            return
        if options.index_sanity_only:
            _check_offset_index(path, index, entries, base_offset)
            print(f"{path} passed sanity check.", file=out)
            return
        for n in range(entries):
            relative, position = _OFFSET_ENTRY.unpack_from(index, n * _OFFSET_ENTRY.size)
            offset = base_offset + relative
            batch = _first_batch_at(log, position, options.max_message_size)
            found = -1 if batch is None else batch.last_offset
            if found != offset:
                report.index_mismatches.setdefault(str(path.absolute()), {})[offset] = found
            if not options.verify_only:
                print(f"offset: {offset} position: {position}", file=out)


def _check_offset_index(path: Path, index: memoryview, entries: int, base_offset: int) -> None:
    """Kafka's OffsetIndex.sanityCheck, with its messages."""
    (relative, _) = _OFFSET_ENTRY.unpack_from(index, (entries - 1) * _OFFSET_ENTRY.size)
    if base_offset + relative < base_offset:
        raise DumpError(f"Corrupt index found, index file ({path.absolute()}) has non-zero size "
                        f"but the last offset is {base_offset + relative} which is less than "
                        f"the base offset {base_offset}.")
    _check_whole_entries(path, index, _OFFSET_ENTRY, "Index")


def _check_whole_entries(path: Path, index: memoryview, entry: struct.Struct, kind: str) -> None:
    if len(index) % entry.size:
        raise DumpError(f"{kind} file {path.absolute()} is corrupt, found {len(index)} bytes "
                        f"which is neither positive nor a multiple of {entry.size}.")


def dump_time_index(path: Path, options: DumpOptions, report: DumpReport,
                    out: TextIO) -> None:
    """Kafka's dumpTimeIndex: `timestamp: T offset: O` per entry, each checked against the
    largest record timestamp of the batch ending at that offset."""
    base_offset = _base_offset(path)
    stem = path.name.split(".")[0]
    log_path, index_path = path.with_name(stem + LOG_SUFFIX), path.with_name(stem + INDEX_SUFFIX)
    name = str(path.absolute())
    with _mapped(path) as time_index, _mapped(log_path) as log, _mapped(index_path) as index:
        entries = _used_entries(time_index, _TIME_ENTRY)
        if options.index_sanity_only:
            _check_time_index(path, time_index, entries, base_offset)
            print(f"{path} passed sanity check.", file=out)
            return
        indexed = list(_OFFSET_ENTRY.iter_unpack(
            index[:_used_entries(index, _OFFSET_ENTRY) * _OFFSET_ENTRY.size]))
        indexed_offsets = [base_offset + relative for relative, _ in indexed]
        previous_ts = -1
        for n in range(entries):
            timestamp, relative = _TIME_ENTRY.unpack_from(time_index, n * _TIME_ENTRY.size)
            offset = base_offset + relative
            # The batch holding `offset`: scan from the last offset index entry at or below it.
            below = bisect.bisect_right(indexed_offsets, offset) - 1
            start = indexed[below][1] if below >= 0 else 0
            batch = next(((pos, h) for pos, h in iter_batch_headers(log, start)
                          if h.last_offset >= offset), None)
            if batch is None or batch[1].last_offset != offset:
                report.time_offsets_not_found.setdefault(name, []).append(
                    (offset, -1 if batch is None else batch[1].last_offset))
            else:
                try:
                    _, records = decode_records(log, batch[0], verify_crc=False)
                except DecodeError as exc:
                    raise DumpError(f"cannot decode the batch at position {batch[0]} of "
                                    f"{log_path}: {exc}") from None
                max_ts = max((r.timestamp for r in records), default=-1)
                if max_ts != timestamp:
                    report.time_mismatches.setdefault(name, []).append((timestamp, max_ts))
                if previous_ts >= timestamp:
                    report.time_out_of_order.setdefault(name, []).append((timestamp, previous_ts))
            if not options.verify_only:
                print(f"timestamp: {timestamp} offset: {offset}", file=out)
            previous_ts = timestamp


def _check_time_index(path: Path, index: memoryview, entries: int, base_offset: int) -> None:
    """Kafka's TimeIndex.sanityCheck, with its messages."""
    if entries:
        first_ts, _ = _TIME_ENTRY.unpack_from(index, 0)
        last_ts, relative = _TIME_ENTRY.unpack_from(index, (entries - 1) * _TIME_ENTRY.size)
        if last_ts < first_ts:
            raise DumpError(f"Corrupt time index found, time index file ({path.absolute()}) "
                            f"has non-zero size but the last timestamp is {last_ts} which is "
                            f"less than the first timestamp {first_ts}")
        if base_offset + relative < base_offset:
            raise DumpError(f"Corrupt time index found, time index file ({path.absolute()}) "
                            f"has non-zero size but the last offset is {base_offset + relative} "
                            f"which is less than the first offset {base_offset}")
    _check_whole_entries(path, index, _TIME_ENTRY, "Time index")


# -- producer snapshots and transaction indexes ----------------------------------------------------


def dump_producer_snapshot(path: Path, out: TextIO) -> None:
    """Kafka's dumpProducerIdSnapshot: one line per snapshot entry. We store one entry per
    remembered batch of a producer, oldest first, so a producer may have several lines; a
    corrupt snapshot is reported on stderr, as Kafka does, without failing the run."""
    try:
        entries = decode_snapshot(path.read_bytes())
    except DecodeError as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return
    for entry in entries:
        txn_first = "OptionalLong.empty" if entry.current_txn_first_offset < 0 else \
            f"OptionalLong[{entry.current_txn_first_offset}]"
        prefix = (f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
                  f"coordinatorEpoch: {entry.coordinator_epoch} "
                  f"currentTxnFirstOffset: {txn_first} lastTimestamp: ")
        if not entry.batches:
            print(f"{prefix}{entry.last_timestamp_ms}", file=out)
        for n, batch in enumerate(entry.batches, 1):
            last_timestamp = entry.last_timestamp_ms if n == len(entry.batches) \
                else batch.timestamp_ms
            print(f"{prefix}{last_timestamp} firstSequence: {batch.first_sequence} "
                  f"lastSequence: {batch.last_sequence} lastOffset: {batch.last_offset} "
                  f"offsetDelta: {batch.offset_delta} timestamp: {batch.timestamp_ms}", file=out)


def dump_txn_index(path: Path, out: TextIO) -> None:
    """Kafka's dumpTxnIndex: one line per aborted transaction."""
    try:
        aborted, _ = decode_aborted_txns(path.read_bytes())
    except DecodeError as exc:
        raise DumpError(f"{path}: {exc}") from None
    for txn in aborted:
        print(f"version: {ABORTED_TXN_VERSION} producerId: {txn.producer_id} "
              f"firstOffset: {txn.first_offset} lastOffset: {txn.last_offset} "
              f"lastStableOffset: {txn.last_stable_offset}", file=out)
