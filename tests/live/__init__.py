"""Tests of nvldb_pl/live.py and what it serves."""
