"""What the workflow loop asks of the cloud: one interface (``base``), one module
per backend."""
