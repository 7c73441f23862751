#!/bin/sh
# Produce increasing integers and print each acknowledgement as JSON, with
# kafka-verifiable-producer.sh's flags.
# Apache Kafka's script name for `kafka-ext verifiable-producer`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" verifiable-producer "$@"
