"""Thin MCP adapters: each module registers plain typed functions from the domain modules."""
