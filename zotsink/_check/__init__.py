"""Checks of a finished OUT: verify (and its repair), and missing."""
