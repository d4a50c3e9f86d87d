"""Test helpers that are real programs (servers, fault injectors), not fixtures."""
