"""Processes: the per-component monitor (stdlib only, runs apart), handles to an attempt's process tree, the last net."""
