"""The group coordinator: consumer groups and committed offsets over __consumer_offsets."""
