"""collect: many tiny files (or a tar of them) into one de-duplicated table."""
