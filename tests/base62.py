"""Base62 written again for the tests, so that they do not trust the code they check."""

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def base62(number: int) -> str:
    """Most significant digit first."""
    digits = ""
    while number > 0:
        digits = ALPHABET[number % 62] + digits
        number //= 62
    return digits
