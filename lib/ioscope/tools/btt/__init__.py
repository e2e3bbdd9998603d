"""ioscope btt: btt's own command line and output files, from btt's own pairing."""
