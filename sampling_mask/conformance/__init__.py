"""Conformance suite: vectors, runner and hypothesis strategies for implementations of spec v1."""
