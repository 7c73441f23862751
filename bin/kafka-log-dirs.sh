#!/bin/sh
# Describe the log dirs of brokers, with kafka-log-dirs.sh's flags.
# Apache Kafka's script name for `kafka-ext log-dirs`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" log-dirs "$@"
