#!/bin/sh
# Send stdin lines to a topic, with kafka-console-producer.sh's flags.
# Apache Kafka's script name for `kafka-ext console-producer`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" console-producer "$@"
