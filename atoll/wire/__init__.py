"""Typed messages between the processes of one server, and their channels."""
