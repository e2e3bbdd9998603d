"""ioscope record: every block event into a capture; --ring: the flight recorder (flight.py)."""
