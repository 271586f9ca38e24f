"""The helper that runs on the GPU box: standard library only, Python 3.8+.

It is shipped as a zipapp (see gpuroom.tui.transport.helper_build) and answers every question the
jump host asks with one JSON document.
"""

__version__ = "0.1.0"

# Bumped whenever a field of the probe document changes meaning or moves.
SCHEMA = 1
