//go:build !linux

package evidence

// writeUnnamed is Linux's; elsewhere Put writes a temporary file.
func (s *FileStore) writeUnnamed(string, string, []byte) (bool, error, error) {
	return false, nil, nil
}
