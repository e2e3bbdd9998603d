"""The exporter's own metrics, as node_exporter exports its own: prometheus_client's process collector
(process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, process_max_fds, ...) and
garbage collector's (python_gc_*), the scrape handler's counters under promhttp's names
(promhttp_metric_handler_requests_total{code}, promhttp_metric_handler_requests_in_flight,
promhttp_metric_handler_errors_total{cause}), and the connections (ioscope_http_*).
`--web.disable-exporter-metrics` leaves them out."""

from __future__ import annotations

from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from ioscope.tools.exporter.server import Stats


class SelfMetrics:
    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, GCCollector, ProcessCollector

        own = CollectorRegistry()  # not the default registry: collected here, at each scrape
        self.process = ProcessCollector(registry=own)
        self.gc = GCCollector(registry=own)

    def families(self, s: Stats) -> list[Any]:
        out: list[Any] = [*self.process.collect(), *self.gc.collect()]
        req = CounterMetricFamily("promhttp_metric_handler_requests",
                                  "scrapes of the telemetry path, by the HTTP status answered", labels=["code"])
        for code in sorted({200, 500, 503, *s.by_code}):
            req.add_metric([str(code)], s.by_code.get(code, 0))
        inf = GaugeMetricFamily("promhttp_metric_handler_requests_in_flight",
                                "scrapes being answered (this one included)")
        inf.add_metric([], s.in_flight)
        err = CounterMetricFamily("promhttp_metric_handler_errors",
                                  "collections that failed (answered 500)", labels=["cause"])
        err.add_metric(["gathering"], s.errors)
        conns = GaugeMetricFamily("ioscope_http_connections", "connections open (--web.max-connections bounds them)")
        conns.add_metric([], s.connections)
        closed = CounterMetricFamily(
            "ioscope_http_connections_closed",
            "connections closed, by why: idle_timeout, read_timeout, evicted (for a new one, past "
            "--web.max-connections), tls_handshake, bad_request, client_closed, done, ...", labels=["reason"])
        for why in sorted({"idle_timeout", "read_timeout", "evicted", *s.closed}):
            closed.add_metric([why], s.closed.get(why, 0))
        return [*out, req, inf, err, conns, closed]


__all__ = ["SelfMetrics"]
