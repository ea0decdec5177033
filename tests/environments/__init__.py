"""Tests of nvldb_pl/environments/ and what it serves."""
