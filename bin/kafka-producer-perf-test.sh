#!/bin/sh
# Measure producer throughput and latency, with kafka-producer-perf-test.sh's flags.
# Apache Kafka's script name for `kafka-ext producer-perf-test`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" producer-perf-test "$@"
