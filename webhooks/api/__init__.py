"""The public webhook routes: registration, pings, deliveries, endpoint stats, and the
OpenAPI description of the deliveries themselves."""
