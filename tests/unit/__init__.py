"""Pure logic: no database, no server, no process; each test runs in milliseconds."""
