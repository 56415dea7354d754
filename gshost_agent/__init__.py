"""The node agent (`gshost-agent`): runs real game-server processes on a node and reports what
they do to the control plane. It imports nothing of Django; the control plane may read its
game templates (`gshost_agent.templates`)."""

__version__ = "0.1.0"
