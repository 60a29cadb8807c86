"""The node daemon: a store-and-forward MTA with gRPC services (see docs/architecture.md)."""
