"""herald serve: the HTTP endpoints (one-click unsubscribe, provider webhooks) and the inbound
SMTP listener (bounces, complaints, mailto unsubscribes)."""
