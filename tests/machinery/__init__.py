"""Tests of nvldb_pl/machinery/ and what it serves."""
