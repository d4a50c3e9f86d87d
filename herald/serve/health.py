"""``herald serve``'s probes and metrics: ``GET /readyz`` and ``GET /metrics``.

``/readyz``: 200 "ready" when the database answers and its schema is current, else 503 with the
reason (herald.app.readiness) — for a load balancer or an orchestrator's readiness probe.
``/metrics``: the database's gauges (herald.metrics_outbox) in Prometheus' text format, from a
registry private to this application. Both read the database in a thread, never on the loop.
"""

from __future__ import annotations

import sqlalchemy as sa
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from herald.app.readiness import not_ready
from herald.metrics import ProcessMetrics


def routes(engine: sa.Engine) -> list[BaseRoute]:
    metrics = ProcessMetrics(engine)

    async def ready(_request: Request) -> Response:
        reason = await run_in_threadpool(not_ready, engine)
        if reason is not None:
            return PlainTextResponse(f"not ready: {reason}", status_code=503)
        return PlainTextResponse("ready")

    async def exposition(_request: Request) -> Response:
        body = await run_in_threadpool(generate_latest, metrics.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return [
        Route("/readyz", ready, methods=["GET"]),
        Route("/metrics", exposition, methods=["GET"]),
    ]
