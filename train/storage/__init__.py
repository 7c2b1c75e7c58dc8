"""The run's files on disk: how each is written (writes) and what a failing file system means, in words (faults)."""
