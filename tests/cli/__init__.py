"""Tests of nvldb_pl/cli.py and what it serves."""
