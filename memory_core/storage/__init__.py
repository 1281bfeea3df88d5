"""PostgreSQL: the database and its migrations, the dialogue store, vector indexes, the spool."""
