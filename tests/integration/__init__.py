"""A real database (SQLite and PostgreSQL) and/or real SMTP/HTTP servers, all in this process."""
