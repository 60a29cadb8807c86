"""The node daemon: a store-and-forward MTA with gRPC services (see DESIGN.md section 5)."""
