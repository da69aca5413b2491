"""Model clients: real providers and the test doubles shipped with tether."""
