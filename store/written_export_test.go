package store

// SavePaths returns how many saves of s compared the round with what s
// wrote last (fast) and how many read the tables back (full).
func (s *DB) SavePaths() (fast, full int) {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	return s.mem.fast, s.mem.full
}

// Forget drops what s remembers of its last save: its next save reads
// the tables back, as every save did before it remembered.
func (s *DB) Forget() {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	s.mem.last = nil
}
