package gateway

import (
	"os/exec"
	"strings"
	"testing"
)

// TestGatewayNamesNoDriver keeps drivers pluggable: the gateway and its
// front doors reach drivers only through the contract in package drivers
// and its optional interfaces, so neither they nor anything they import
// depends on a driver package. Programs choose their drivers by importing
// drivers/builtin (or their own).
func TestGatewayNamesNoDriver(t *testing.T) {
	t.Parallel()
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{.ImportPath}}", ".", "./frontdoor/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const driversPkg = "github.com/toolgate/toolgate/drivers"
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, driversPkg+"/") {
			t.Errorf("the gateway depends on the driver package %s", p)
		}
	}
}
