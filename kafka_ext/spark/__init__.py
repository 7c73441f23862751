"""PySpark data source `kafka-ext`: batch and streaming reads of topics."""
