#!/bin/sh
# Format log dirs with a cluster id, print a new id, or show what the dirs hold, with kafka-storage.sh's flags.
# Thin launcher with Apache Kafka's script name; runs `kafka-ext storage`.
if command -v kafka-ext >/dev/null 2>&1; then
    exec kafka-ext storage "$@"
fi
# Not installed as a console script: run the package from this checkout.
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
exec env PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m kafka_ext.cli.main storage "$@"
