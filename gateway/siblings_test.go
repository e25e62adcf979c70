package gateway

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestSiblingsDoNotImportGateway keeps the arrows one way: the packages
// that left gateway (the configuration model, approvals, recovery and the
// rest below gateway/, but for the front doors, which are above it) are
// imported by gateway and never import it, directly or through another
// package. It asks the go command, as a reviewer would with "go list
// -deps".
func TestSiblingsDoNotImportGateway(t *testing.T) {
	t.Parallel()
	const self = "github.com/toolgate/toolgate/gateway"
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	list := func(args ...string) []string {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(t.Context(), goCmd, append([]string{"list"}, args...)...)
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
		}
		return strings.Fields(string(out))
	}
	siblings := []string{"github.com/toolgate/toolgate/config"}
	for _, pkg := range list(self + "/...") {
		if pkg != self && !strings.HasPrefix(pkg, self+"/frontdoor") {
			siblings = append(siblings, pkg)
		}
	}
	if len(siblings) < 10 {
		t.Fatalf("found %d siblings of gateway (%v); the listing went wrong", len(siblings), siblings)
	}
	for _, pkg := range siblings {
		if slices.Contains(list("-deps", pkg), self) {
			t.Errorf("%s imports gateway: the arrow must point from gateway to it", pkg)
		}
	}
}
