"""Tests of nvldb_pl/serve/ and what it serves."""
