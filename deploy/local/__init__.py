"""`det deploy local`: the whole cluster as processes on this machine."""
