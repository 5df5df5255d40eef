-- The reconciler's save remembers the rows it wrote and, while no one else
-- has written the state tables since, compares the next round with what it
-- remembers instead of reading every row back (issue 23: 10,624 nodes and
-- 1,000 Trainers read back were most of a save). meta.state_written is the
-- token of the save that wrote the tables last; any other change to them —
-- another process's save rewrites it, an admin's hand edit (docs/trainers.md)
-- deletes it here — makes the next save read the tables back in full.
CREATE TRIGGER nodes_written_ins AFTER INSERT ON nodes BEGIN DELETE FROM meta WHERE key = 'state_written'; END;
CREATE TRIGGER nodes_written_upd AFTER UPDATE ON nodes BEGIN DELETE FROM meta WHERE key = 'state_written'; END;
CREATE TRIGGER nodes_written_del AFTER DELETE ON nodes BEGIN DELETE FROM meta WHERE key = 'state_written'; END;
CREATE TRIGGER trainers_written_ins AFTER INSERT ON trainers BEGIN DELETE FROM meta WHERE key = 'state_written'; END;
CREATE TRIGGER trainers_written_upd AFTER UPDATE ON trainers BEGIN DELETE FROM meta WHERE key = 'state_written'; END;
CREATE TRIGGER trainers_written_del AFTER DELETE ON trainers BEGIN DELETE FROM meta WHERE key = 'state_written'; END;
CREATE TRIGGER allocations_written_ins AFTER INSERT ON allocations BEGIN DELETE FROM meta WHERE key = 'state_written'; END;
CREATE TRIGGER allocations_written_upd AFTER UPDATE ON allocations BEGIN DELETE FROM meta WHERE key = 'state_written'; END;
CREATE TRIGGER allocations_written_del AFTER DELETE ON allocations BEGIN DELETE FROM meta WHERE key = 'state_written'; END;
