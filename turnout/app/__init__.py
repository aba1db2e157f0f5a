"""What a person touches: the command line, the Python API, ``check`` and the results pages."""
