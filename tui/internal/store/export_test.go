package store

import "slices"

// Remove drops a lock's row.
func (s *Store) Remove(name string) {
	r := s.rows[name]
	if r == nil {
		return
	}
	if i := s.find(s.all, r); i >= 0 {
		s.all = slices.Delete(s.all, i, i+1)
	}
	if s.filter != "" {
		if i := s.find(s.filtered, r); i >= 0 {
			s.filtered = slices.Delete(s.filtered, i, i+1)
		}
	}
	s.account(r, -1)
	delete(s.rows, name)
}
