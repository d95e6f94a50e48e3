"""Built-in device backends (registered as plugins, like third-party backends)."""
