#!/bin/sh
# End-to-end latency, with kafka-e2e-latency.sh's arguments.
# Apache Kafka's script name for `kafka-ext e2e-latency`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" e2e-latency "$@"
