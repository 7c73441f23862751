#!/bin/sh
# Create, list, describe, alter and delete topics, with kafka-topics.sh's flags.
# Apache Kafka's script name for `kafka-ext topics`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" topics "$@"
