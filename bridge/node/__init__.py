"""Nodes wire the stages together and own the threads: primary.py, replica.py."""
