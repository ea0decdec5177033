"""Tests of nvldb_pl/live/ and what it serves."""
