"""Where and how a webhook's host may be reached: its name resolved within the attempt's
deadline, only the checked, pinned public address connected to, over HTTPS with keep-alive
pools."""
