#!/bin/sh
# Measure consumer throughput, with kafka-consumer-perf-test.sh's flags.
# Apache Kafka's script name for `kafka-ext consumer-perf-test`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" consumer-perf-test "$@"
