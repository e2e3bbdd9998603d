"""ioscope collect: a capture plus the host's context in one bundle (context.py: the collector of the
host's settings; redact.py: pseudonyms; bundle.py: the file; cmd.py: the command)."""
