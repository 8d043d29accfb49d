package store

import "slices"

// Remove drops a lock's row.
func (s *Store) Remove(name string) {
	if r := s.rows[name]; r != nil {
		delete(s.rows, name)
		s.all = slices.DeleteFunc(s.all, func(x *Row) bool { return x == r })
		s.dirty = true
	}
}
