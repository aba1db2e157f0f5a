"""Local training: the part of a client round that runs SGD on local data."""
