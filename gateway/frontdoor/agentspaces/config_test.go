package agentspaces

import (
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway/frontdoor"
)

func loadDoors(t *testing.T, section string) ([]frontdoor.Loaded, error) {
	t.Helper()
	cfg, err := config.ParseConfig([]byte("listen: 127.0.0.1:50051\nfront_doors:\n  agent_spaces: " + section + "\n"))
	if err != nil {
		return nil, err
	}
	return frontdoor.Load(cfg)
}

func TestOneLineTurnsTheDoorOnWithItsDefaults(t *testing.T) {
	doors, err := loadDoors(t, "{listen: 127.0.0.1:8787}")
	if err != nil || len(doors) != 1 || doors[0].Name != Name {
		t.Fatalf("%v %v", doors, err)
	}
	c := doors[0].Config.(*Config)
	if c.Driver != "workspace" || c.MaxOperations != 256 || c.PausedBatches != 1024 || c.BodyLimit() != frontdoor.DefaultMaxBodyBytes {
		t.Errorf("defaults %+v", c)
	}
	if doors, err := loadDoors(t, "{}"); err != nil || len(doors) != 0 {
		t.Errorf("without listen the door is off: %v %v", doors, err)
	}
}

func TestBadSettingsNameTheirKey(t *testing.T) {
	for _, tc := range []struct{ section, key string }{
		{"{listen: 127.0.0.1:8787, max_operations: 0}", "front_doors.agent_spaces.max_operations"},
		{"{listen: 127.0.0.1:8787, max_operations: 5000}", "front_doors.agent_spaces.max_operations"},
		{"{listen: 127.0.0.1:8787, paused_batches: -1}", "front_doors.agent_spaces.paused_batches"},
		{"{listen: 127.0.0.1:8787, driver: 'a.b'}", "front_doors.agent_spaces.driver"},
		{"{listen: 127.0.0.1:8787, max_operation: 5}", "max_operation"},
	} {
		_, err := loadDoors(t, tc.section)
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s: %v, want an error naming %s", tc.section, err, tc.key)
		}
	}
}
