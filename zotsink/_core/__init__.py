"""The write path: files, locks, records, the writer, batching, side files.

The ground floor of zotsink: it imports nothing of zotsink but ``zotsink.errors``.
"""
