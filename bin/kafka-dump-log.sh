#!/bin/sh
# Print log segments, indexes and snapshots, with kafka-dump-log.sh's flags.
# Apache Kafka's script name for `kafka-ext dump-log`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" dump-log "$@"
