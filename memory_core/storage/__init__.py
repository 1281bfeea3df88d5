"""PostgreSQL plumbing: the database and its migrations, the pool handle, the store base, keyset
paging, and the small shared shapes (daily counters, delete by scope, row take/put-back)."""
