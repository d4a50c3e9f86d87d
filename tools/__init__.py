"""Repository tools (not shipped: setuptools lists the product packages explicitly)."""
