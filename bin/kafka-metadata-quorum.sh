#!/bin/sh
# Describe the KRaft metadata quorum (--status, --replication), with kafka-metadata-quorum.sh's flags.
# Thin launcher with Apache Kafka's script name; runs `kafka-ext metadata-quorum`.
if command -v kafka-ext >/dev/null 2>&1; then
    exec kafka-ext metadata-quorum "$@"
fi
# Not installed as a console script: run the package from this checkout.
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
exec env PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m kafka_ext.cli.main metadata-quorum "$@"
