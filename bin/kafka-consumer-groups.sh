#!/bin/sh
# List, describe and delete consumer groups and reset their offsets, with
# kafka-consumer-groups.sh's flags. Apache Kafka's script name for `kafka-ext consumer-groups`;
# bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" consumer-groups "$@"
