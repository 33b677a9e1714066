"""rlsup."""
