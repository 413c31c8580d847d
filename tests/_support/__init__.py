"""Helpers shared by the test areas (real-component probes, generated fixtures)."""
