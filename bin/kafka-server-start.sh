#!/bin/sh
# Start a broker: kafka-server-start.sh [server.properties] [--override key=value ...]
# Apache Kafka's script name for `kafka-ext server`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" server "$@"
