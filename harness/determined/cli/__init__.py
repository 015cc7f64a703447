"""The `det` command line: it speaks gRPC to the gateway only."""
