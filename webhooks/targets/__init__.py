"""Where a webhook may send: the static URL checks (SSRF) and, in development only, the
loopback resolver for the demo receiver."""
