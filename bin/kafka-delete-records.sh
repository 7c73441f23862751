#!/bin/sh
# Delete the records of partitions before given offsets, with kafka-delete-records.sh's flags.
# Apache Kafka's script name for `kafka-ext delete-records`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" delete-records "$@"
