//go:build !linux

package evidence

// Elsewhere the os.Root does all the walking, and Put writes a temporary
// file.

func openRootFD(string) int { return -1 }

func closeRootFD(int) error { return nil }

func (s *FileStore) writeUnnamed(string, string, []byte, func() error) (bool, error, error) {
	return false, nil, nil
}

func (s *FileStore) mkdir(name string) error { return s.root.Mkdir(name, dirPerm) }

func (s *FileStore) syncDir(dir string) error {
	f, err := s.root.Open(dir)
	if err != nil {
		return err
	}
	return syncAndClose(f)
}
