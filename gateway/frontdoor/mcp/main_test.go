package mcpdoor

import (
	"os"
	"testing"

	"github.com/toolgate/toolgate/drivers/workspace"
)

func TestMain(m *testing.M) {
	// The workspace driver of the test gateways starts this test binary
	// again as its shell sandbox's init.
	workspace.MaybeRunSandbox()
	os.Exit(m.Run())
}
