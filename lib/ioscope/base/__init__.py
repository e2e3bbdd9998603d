"""The base layer: pure helpers and readers of /proc and /sys that every layer above may use
(errors, formatting, devices, histograms, rates, the test-device builder). Imports nothing above it."""
