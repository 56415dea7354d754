"""Where and how a webhook's host may be reached: the static URL checks (SSRF), the outbound
HTTPS client (name resolution within the deadline, connections only to the checked public
address), and, in development only, the loopback resolver for the demo receiver."""
