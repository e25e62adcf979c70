package workspace

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	// Sandboxed shell commands start this test binary again as the
	// sandbox's init.
	MaybeRunSandbox()
	os.Exit(m.Run())
}
