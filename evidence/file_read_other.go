//go:build !linux

package evidence

import (
	"context"
	"errors"
)

// fileFolder is Linux's; elsewhere a request's artifacts are read through
// Get.
type fileFolder struct{}

func (*fileFolder) close() {}

func (*fileFolder) get(context.Context, string, string) ([]byte, error) {
	return nil, errors.New("evidence: no folder reads on this system")
}

// walkFolders is Linux's; elsewhere WalkInfo reads folders through the
// root.
func (s *FileStore) walkFolders(context.Context, string, string, func(KeyInfo) error) (bool, error) {
	return false, nil
}

// storeFolders is Linux's; elsewhere a request's artifacts are read
// through Get.
type storeFolders struct{}

func (s *FileStore) requestFolders() *storeFolders { return nil }

func (*storeFolders) open(string) (*fileFolder, bool) { return nil, false }

func (*storeFolders) close() {}
