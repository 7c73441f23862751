#!/bin/sh
# Describe the log dirs of brokers, with kafka-log-dirs.sh's flags.
# Thin launcher with Apache Kafka's script name; runs `kafka-ext log-dirs`.
if command -v kafka-ext >/dev/null 2>&1; then
    exec kafka-ext log-dirs "$@"
fi
# Not installed as a console script: run the package from this checkout.
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
exec env PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m kafka_ext.cli.main log-dirs "$@"
