package evidence

import (
	"strings"
	"testing"
)

func TestLayout(t *testing.T) {
	t.Parallel()
	if got, want := Key("r-1", ArtifactToolResult), "requests/r-1/tool_result.json"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	if got, want := RequestPrefix("r-1"), "requests/r-1/"; got != want {
		t.Errorf("RequestPrefix = %q, want %q", got, want)
	}
	for _, a := range []string{ArtifactRequest, ArtifactPolicyDecision, ArtifactToolResult, ArtifactResponse, ArtifactManifest} {
		k := Key("r-1", a)
		if err := ValidKey(k); err != nil {
			t.Errorf("ValidKey(Key(%q)) = %v", a, err)
		}
		if !strings.HasPrefix(k, RequestPrefix("r-1")) {
			t.Errorf("Key(%q) = %q is not under RequestPrefix", a, k)
		}
	}
}
