#!/bin/sh
# Start a broker: kafka-ext-server-start.sh [server.properties] [--override key=value ...]
# Thin launcher with Apache Kafka's script name; runs `kafka-ext server`.
if command -v kafka-ext >/dev/null 2>&1; then
    exec kafka-ext server "$@"
fi
# Not installed as a console script: run the package from this checkout.
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
exec env PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m kafka_ext.cli.main server "$@"
