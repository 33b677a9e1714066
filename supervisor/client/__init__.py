"""Talking to a run through the control protocol: the client session, SSH, the stdio bridge, the fleet."""
