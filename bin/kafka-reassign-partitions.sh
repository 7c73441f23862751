#!/bin/sh
# Move replicas between log dirs (log_dirs in the JSON), with kafka-reassign-partitions.sh's flags.
# Thin launcher with Apache Kafka's script name; runs `kafka-ext reassign-partitions`.
if command -v kafka-ext >/dev/null 2>&1; then
    exec kafka-ext reassign-partitions "$@"
fi
# Not installed as a console script: run the package from this checkout.
here=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
exec env PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m kafka_ext.cli.main reassign-partitions "$@"
