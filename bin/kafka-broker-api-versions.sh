#!/bin/sh
# Print every broker's API versions, as kafka-broker-api-versions.sh does.
# Apache Kafka's script name for `kafka-ext broker-api-versions`; bin/_kafka-ext-run.sh picks the Python.
here=$(dirname -- "$(readlink -f -- "$0" 2>/dev/null || echo "$0")")
exec "$here/_kafka-ext-run.sh" broker-api-versions "$@"
