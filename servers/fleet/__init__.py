"""The nodes servers run on, which node a new server goes on, and moving it (docs/nodes.md).

`nodes` (registering a node, its token, its ports, whether it can be reached), `placement`
(a plan's room on a node and the rule that picks one) and `moves` (a move's row and address,
`server.migrated`; between agent nodes the data travels by `servers.agents.transfers`).
"""
