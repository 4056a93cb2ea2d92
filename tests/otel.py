"""OpenTelemetry's SDK around a test: an in-memory metric reader and span exporter that
deltasink records on (:func:`deltasink.observe.use`), and the metrics read back as plain
values."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from deltasink import observe

__all__ = ["Collected", "collected"]


@dataclass
class Collected:
    """What deltasink recorded during the block."""

    reader: InMemoryMetricReader
    exporter: InMemorySpanExporter

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """Each metric's points: ``(attributes, value)``; a histogram's value is its
        ``(count, sum)``."""
        found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    points = found.setdefault(metric.name, [])
                    for point in metric.data.data_points:
                        value = (point.count, point.sum) if hasattr(point, "count") else point.value
                        points.append((dict(point.attributes or {}), value))
        return found

    def value(self, name: str, **attributes: Any) -> Any:
        """The value of ``name``'s point with these attributes (``deltasink.`` added)."""
        wanted = {f"deltasink.{k}": v for k, v in attributes.items()}
        points = [v for attrs, v in self.metrics().get(name, []) if attrs == wanted]
        assert len(points) == 1, (name, wanted, self.metrics().get(name))
        return points[0]

    def spans(self, name: str) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name == name]


@contextmanager
def collected() -> Iterator[Collected]:
    """Record deltasink's telemetry on fresh SDK providers for the block."""
    reader = InMemoryMetricReader()
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[reader])
    observe.use(meter_provider, tracer_provider)
    try:
        yield Collected(reader, exporter)
    finally:
        observe.use(None, None)
        meter_provider.shutdown()
        tracer_provider.shutdown()
