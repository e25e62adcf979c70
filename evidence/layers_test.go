package evidence

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVerifierLinksNoS3Client keeps the layers apart: evidence (the
// record formats, the log and the verifier) and the layers below it build
// without the AWS SDK and without the packages that link it, so that a
// program that only verifies evidence links no S3 client. It asks the go
// command for each package's dependencies, as a reviewer would with
// "go list -deps".
func TestVerifierLinksNoS3Client(t *testing.T) {
	t.Parallel()
	goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
	forbidden := []string{
		"github.com/aws/",
		"github.com/toolgate/toolgate/evidence/s3store",
		"github.com/toolgate/toolgate/evidence/storeurl",
	}
	tests := []struct {
		name string
		pkg  string
	}{
		{"the verifier", "github.com/toolgate/toolgate/evidence"},
		{"the storage layer", "github.com/toolgate/toolgate/evidence/storage"},
		{"the log formats", "github.com/toolgate/toolgate/evidence/tlog"},
		{"the seals", "github.com/toolgate/toolgate/evidence/trust"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			cmd := exec.CommandContext(t.Context(), goCmd, "list", "-deps", tt.pkg)
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v\n%s", tt.pkg, err, stderr.Bytes())
			}
			deps := strings.Fields(string(out))
			if len(deps) == 0 || deps[len(deps)-1] != tt.pkg {
				t.Fatalf("go list -deps %s listed %d packages, not ending with the package itself", tt.pkg, len(deps))
			}
			var bad []string
			for _, dep := range deps {
				for _, prefix := range forbidden {
					if strings.HasPrefix(dep, prefix) {
						bad = append(bad, dep)
					}
				}
			}
			if len(bad) > 0 {
				t.Errorf("%s depends on %d forbidden packages, among them %s", tt.pkg, len(bad), strings.Join(bad[:min(len(bad), 5)], ", "))
			}
		})
	}
}
