"""What the Application API's rules refuse with (the API's edge turns them into answers)."""

from gshost.errors import InvalidState, NotFound, RefusedValue


class NoCapacity(InvalidState):
    """No node can take the server; the message names what is short. Nothing was recorded."""

    code = "no_capacity"


class ExternalIdConflict(InvalidState):
    """The integration already has a server (or customer) under this external id, made with
    another request."""

    code = "external_id_conflict"

    def __init__(self, what: str, existing_id: str) -> None:
        super().__init__(
            f"This integration already has a {what} with that external_id ({existing_id}), "
            "made from another request body."
        )


class CustomerHasServers(InvalidState):
    code = "customer_has_servers"
    default_message = "The customer still has servers: delete them first."


class PlanInUse(InvalidState):
    code = "plan_in_use"
    default_message = "Servers are sold under this plan: move them to another plan first."


class CustomerNotFound(NotFound):
    default_message = "No such customer."


class PlanNotFound(NotFound):
    default_message = "No such plan."


class IdempotencyKeyReused(RefusedValue):
    code = "idempotency_key_reused"
    default_message = "This Idempotency-Key was used with another request (method, path or body)."


class IdempotencyKeyInUse(InvalidState):
    """The first request with this key is still being carried out; retry after a moment."""

    code = "idempotency_key_in_use"
    default_message = "A request with this Idempotency-Key is still in progress; retry shortly."
