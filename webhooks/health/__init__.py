"""Endpoint health: hourly outcome counts kept as deliveries settle, the stats read from
them, and the failure notices sent to owners."""
