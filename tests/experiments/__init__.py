"""Tests of nvldb_pl/experiments/ and what it serves."""
