"""Test helpers for the egress guard: a fake resolver, a fake socket opener and local servers.

Nothing here touches real DNS or any address other than servers started on 127.0.0.1.
"""
