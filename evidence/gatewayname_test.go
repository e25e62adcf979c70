package evidence

import "testing"

func TestParseGatewayName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, instance string
		epoch          uint64
	}{
		{"toolgate/0.1.0@gw-1", "gw-1", 0},
		{"toolgate/0.1.0@gw-1#7", "gw-1", 7},
		{GatewayNameWithEpoch("toolgate/0.1.0@gw-1", 12), "gw-1", 12},
		{GatewayNameWithEpoch("toolgate/0.1.0@gw-1", 0), "gw-1", 0},
		{"toolgate/0.1.0@a@b#3", "a@b", 3},
		{"toolgate/0.1.0@gw#x", "gw#x", 0},
		{"toolgate/0.1.0@gw#", "gw#", 0},
		{"toolgate/0.1.0@gw#07", "gw#07", 0},
		{"toolgate/0.1.0@gw#0", "gw#0", 0},
		{"toolgate/0.1.0@gw#1#2", "gw#1", 2},
		{"toolgate/0.1.0@gw#99999999999999999999999", "gw#99999999999999999999999", 0},
		{"no instance", "", 0},
		{"", "", 0},
	} {
		inst, epoch := ParseGatewayName(tc.name)
		if inst != tc.instance || epoch != tc.epoch {
			t.Errorf("ParseGatewayName(%q) = %q, %d; want %q, %d", tc.name, inst, epoch, tc.instance, tc.epoch)
		}
	}
}

// FuzzParseGatewayName: the name comes from records in the store. It
// never panics, and a name built with an epoch parses back to it.
func FuzzParseGatewayName(f *testing.F) {
	for _, s := range []string{"toolgate/0.1.0@gw-1", "toolgate/0.1.0@gw-1#3", "@#", "x@#0", "a@b@c#18446744073709551615"} {
		f.Add(s, uint64(5))
	}
	f.Fuzz(func(t *testing.T, name string, epoch uint64) {
		inst, had := ParseGatewayName(name)
		if epoch == 0 || had != 0 || inst == "" {
			return
		}
		got, e := ParseGatewayName(GatewayNameWithEpoch(name, epoch))
		if e != epoch || got != inst {
			t.Fatalf("%q with epoch %d parses as %q, %d; without: %q", name, epoch, got, e, inst)
		}
	})
}
