package mcpdoor

import (
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway/frontdoor"
)

func loadDoors(t *testing.T, section string) ([]frontdoor.Loaded, error) {
	t.Helper()
	cfg, err := config.ParseConfig([]byte("listen: 127.0.0.1:50051\nfront_doors:\n  mcp: " + section + "\n"))
	if err != nil {
		return nil, err
	}
	return frontdoor.Load(cfg)
}

func TestOneLineTurnsTheDoorOnWithItsDefaults(t *testing.T) {
	doors, err := loadDoors(t, "{listen: 127.0.0.1:8788}")
	if err != nil || len(doors) != 1 || doors[0].Name != Name {
		t.Fatalf("%v %v", doors, err)
	}
	c := doors[0].Config.(*Config)
	if c.BodyLimit() != frontdoor.DefaultMaxBodyBytes || c.ListTTL != 2*time.Second || c.PolicyRef != "" || c.StateKeyFile != "" ||
		c.ApprovalURL != "" || c.ApprovalTools {
		t.Errorf("defaults %+v", c)
	}
	if doors, err := loadDoors(t, "{}"); err != nil || len(doors) != 0 {
		t.Errorf("without listen the door is off: %v %v", doors, err)
	}
}

func TestBadSettingsNameTheirKey(t *testing.T) {
	for _, tc := range []struct{ section, key string }{
		{"{listen: 127.0.0.1:8788, policy_ref: strict}", "front_doors.mcp.policy_ref"},
		{"{listen: 127.0.0.1:8788, policy_ref: 'policy.a b'}", "front_doors.mcp.policy_ref"},
		{"{listen: 127.0.0.1:8788, list_ttl: -1s}", "front_doors.mcp.list_ttl"},
		{"{listen: 127.0.0.1:8788, list_ttl: 1500us}", "front_doors.mcp.list_ttl"},
		{"{listen: 127.0.0.1:8788, approval_url: 'ftp://x/{approval_id}'}", "front_doors.mcp.approval_url"},
		{"{listen: 127.0.0.1:8788, approval_url: 'https://x/approvals'}", "front_doors.mcp.approval_url"},
		{"{listen: 127.0.0.1:8788, max_body_bytes: -1}", "front_doors.mcp.max_body_bytes"},
		{"{listen: 127.0.0.1:8788, max_body_bytes: 4194304}", "front_doors.mcp.max_body_bytes 4194304: at most"},
		{"{listen: 127.0.0.1:8788, path: /other}", "path"},
		{"{listen: 0.0.0.0:8788}", "front_doors.mcp.listen"},
	} {
		_, err := loadDoors(t, tc.section)
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: %v, want an error naming %s", tc.section, err, tc.key)
		}
	}
	for _, ok := range []string{
		"{listen: 127.0.0.1:8788, policy_ref: policy.strict, list_ttl: 0s, approval_url: 'https://gw.example.com/approvals/{approval_id}', approval_tools: true}",
	} {
		if _, err := loadDoors(t, ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
}

func TestTheKindIsRegistered(t *testing.T) {
	found := false
	for _, k := range frontdoor.Kinds() {
		found = found || k == Name
	}
	if !found {
		t.Errorf("kinds %v lack %q", frontdoor.Kinds(), Name)
	}
}
