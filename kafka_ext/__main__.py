"""`python -m kafka_ext ...` runs the `kafka-ext` command."""

from kafka_ext.cli.main import main

raise SystemExit(main())
