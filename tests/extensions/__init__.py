"""Modules outside the package that build on it, as a researcher's own code would: each extension point is tested from here."""
