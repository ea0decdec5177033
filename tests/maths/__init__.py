"""Tests of nvldb_pl/maths/ and what it serves."""
