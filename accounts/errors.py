"""The errors key reads refuse with; the API and the panel each answer them in one place."""

from gshost.errors import NotFound


class KeyNotFound(NotFound):
    """The same for a key that never existed and another organization's."""

    default_message = "No such key in this organization."
