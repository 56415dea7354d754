"""The errors webhook reads refuse with; the API and the panel each answer them in one place."""

from gshost.errors import NotFound


class WebhookNotFound(NotFound):
    """The same for a webhook that never existed and another organization's."""

    default_message = "No such webhook."


class DeliveryNotFound(NotFound):
    """Not one of the webhook's deliveries of the last 7 days."""

    default_message = "No such delivery."


class ServerOutsideRestrictions(NotFound):
    """A restricted caller filtered by a server it may not see: told exactly what a server
    that does not exist would be told."""

    code = "server_not_found"
    default_message = "No such server."
