"""Privacy accountants: the formal guarantee of the configured defense on this graph."""
