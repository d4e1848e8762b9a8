"""The service's Prometheus metrics (``GET /metrics``), in a registry of its own: runs by
state and recorded nodes by provider (read from the store at each scrape, so every replica
says the same), events relayed and their relay latency, requests, and open event streams."""

from __future__ import annotations

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, generate_latest

from ..runs import RunState
from ..store import Store

__all__ = ["Metrics"]

# Relay latency: from an event's time to its send, in seconds.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    """One service process's metrics."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        ProcessCollector(registry=self.registry)  # memory, CPU, open files: what a leak shows in
        self.tasks = Gauge("nodeprov_tasks", "Tasks of the service's event loop.", registry=self.registry)
        self.runs = Gauge("nodeprov_runs", "Runs in the store, by state.", ["state"], registry=self.registry)
        self.nodes = Gauge(
            "nodeprov_nodes",
            "Runs' nodes the store holds (being made, live or kept), by provider.",
            ["provider"],
            registry=self.registry,
        )
        self.events_relayed = Counter(
            "nodeprov_events_relayed", "Run events sent to event-stream clients.", registry=self.registry
        )
        self.relay_latency = Histogram(
            "nodeprov_relay_latency_seconds",
            "From a run event's time to its send to an event-stream client.",
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.streams = Gauge("nodeprov_event_streams", "Open event streams.", registry=self.registry)
        self.streams_cut = Counter(
            "nodeprov_event_streams_cut",
            "Event streams cut off: their client read too slowly.",
            registry=self.registry,
        )
        self.requests = Counter(
            "nodeprov_http_requests",
            "HTTP requests, by method, route and status.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.pool_nodes = Gauge(
            "nodeprov_pool_nodes",
            "Warm pools' nodes, by pool and state (ready, starting).",
            ["pool", "state"],
            registry=self.registry,
        )
        self.nodes_made = Counter(
            "nodeprov_api_nodes",
            "Nodes provisioned and destroyed through the API, by provider.",
            ["provider", "operation"],
            registry=self.registry,
        )

    async def render(self, store: Store) -> bytes:
        """The text format, the store's gauges read now.

        Raises:
            StoreError: the store could not be read.
        """
        self.tasks.set(len(anyio.get_running_tasks()))
        by_state = await store.run_counts()
        for state in RunState:
            self.runs.labels(state.value).set(by_state.get(state.value, 0))
        self.nodes.clear()
        for provider, count in (await store.node_counts()).items():
            self.nodes.labels(provider).set(count)
        self.pool_nodes.clear()
        counts = await store.pools.counts()
        for pool in await store.pools.all():
            self.pool_nodes.labels(pool.name, "ready").set(counts.get(pool.name, {}).get("ready", 0))
            self.pool_nodes.labels(pool.name, "starting").set(counts.get(pool.name, {}).get("intent", 0))
        return generate_latest(self.registry)
