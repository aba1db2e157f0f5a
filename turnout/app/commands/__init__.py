"""The ``turnout`` commands, one module each: it registers its sub-parser and holds its body.

A command module imports only the standard library and ``core`` at the top, the rest inside its body, so
``turnout --help`` and ``turnout list`` start without torch.
"""
