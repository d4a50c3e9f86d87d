"""Tests that spawn herald (or server) processes, signal them or cap their resources."""
