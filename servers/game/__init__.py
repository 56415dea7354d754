"""What a server's game offers and how it is set up.

`registry` (the games each node offers: templates on agent nodes, the simulated games),
`capabilities` (what the game supports, the plan enables and the key grants), `settings` (the
settings catalogue per game, desired against reported) and `config_events` (settings changed
at a set time and changed back).
"""
