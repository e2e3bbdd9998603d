"""ioscope nic: nicstat's per-interface view (throughput, packets, utilisation, saturation) from netlink."""
