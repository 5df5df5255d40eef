-- An event's origin: the id the writer chose for it, when the writer is
-- not the database's own transaction (a hook's journal record). Unique, so
-- that ingesting the same record twice (a crash between the insert and the
-- removal of its file) records it once. NULL for events written directly.
ALTER TABLE events ADD COLUMN origin TEXT;
CREATE UNIQUE INDEX events_origin ON events (origin) WHERE origin IS NOT NULL;
