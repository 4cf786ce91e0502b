"""The node's HTTP API (aiohttp)."""
