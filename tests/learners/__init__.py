"""Tests of nvldb_pl/learners/ and what it serves."""
