"""pack: binary files as members of one shared tar, appended under the lock."""
