"""Coordinator runtime and the state machines it hosts over internal topics."""
