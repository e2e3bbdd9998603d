"""ioscope collect: a capture plus the host's context in one bundle.

cmd.py: the command (a recording through engines/recording/session.py, the host's context and its
redaction through engines/context/, the bundle through engines/context/bundling.py and capture/bundle.py).
"""
