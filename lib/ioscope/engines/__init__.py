"""Engines: the machinery several tools share, one package each (pairing, aggregate, latency, procio,
recording, context, netlink, query). An engine imports capture/, kernel/ and base/, never a tool."""
