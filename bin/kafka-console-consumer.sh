#!/bin/sh
# Print a topic's records, with kafka-console-consumer.sh's flags.
# Apache Kafka's script name for `kafka-ext console-consumer`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" console-consumer "$@"
