"""Tests of nvldb_pl/loop/ and what it serves."""
