"""The parts of scripts/lab (labs/README.md)."""
