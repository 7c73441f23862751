#!/bin/sh
# Consume as a group member and print its events as JSON, with
# kafka-verifiable-consumer.sh's flags.
# Apache Kafka's script name for `kafka-ext verifiable-consumer`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" verifiable-consumer "$@"
