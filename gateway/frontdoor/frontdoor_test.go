package frontdoor_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/gateway"
	"github.com/toolgate/toolgate/gateway/frontdoor"
)

func TestFrontDoorsOffByDefault(t *testing.T) {
	def, err := config.DefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  config.Config
	}{
		{"the embedded default configuration has no door", def},
		{"a configuration without front_doors has no door", newConfig(t, false, "")},
		{"a door section without listen is off", newConfig(t, false, "  echo: {}\n")},
		{"a door section that is empty is off", newConfig(t, false, "  echo:\n")},
		{"a door section with only other keys is off", newConfig(t, false, "  echo: {routes: [GET /x]}\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doors, err := frontdoor.Load(tc.cfg)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if len(doors) != 0 {
				t.Fatalf("doors on: %v", doors)
			}
		})
	}
	t.Run("serving no doors listens nowhere", func(t *testing.T) {
		s := serve(t, newConfig(t, false, "  echo: {routes: [GET /x]}\n"))
		if a := s.servers.Addr(""); a != nil {
			t.Fatalf("a listener is open at %v", a)
		}
	})
	t.Run("one line turns a door on", func(t *testing.T) {
		doors, err := frontdoor.Load(newConfig(t, false, "  echo: {listen: 127.0.0.1:8787}\n"))
		if err != nil || len(doors) != 1 || doors[0].Name != "echo" || doors[0].Config.ListenAddr() != "127.0.0.1:8787" {
			t.Fatalf("Load = %v, %v", doors, err)
		}
	})
}

func TestUnknownFrontDoorIsAnError(t *testing.T) {
	for _, tc := range []struct {
		name, doors, want string
	}{
		{"a door this build does not have", "  nosuch: {listen: 127.0.0.1:8787}\n",
			`config: front_doors.nosuch: unknown front door (this build has: echo, mirror)`},
		{"a door named in the wrong case", "  Echo: {listen: 127.0.0.1:8787}\n", `front_doors.Echo: unknown front door`},
		{"an unknown door even when off", "  nosuch: {}\n", `front_doors.nosuch: unknown front door`},
		{"a section that is not a mapping", "  echo: 127.0.0.1:8787\n", `config: front_doors.echo: line`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := frontdoor.Load(newConfig(t, false, tc.doors))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestUnknownKeyIsAnErrorInEveryKind(t *testing.T) {
	for _, kind := range frontdoor.Kinds() {
		t.Run(kind, func(t *testing.T) {
			_, err := frontdoor.Load(newConfig(t, false, "  "+kind+": {listen: 127.0.0.1:8787, lisen: 127.0.0.1:1}\n"))
			if err == nil || !strings.Contains(err.Error(), "front_doors."+kind) || !strings.Contains(err.Error(), "lisen") {
				t.Fatalf("Load error = %v, want the misspelt key refused", err)
			}
		})
	}
}

func TestDoorValidationNamesTheKey(t *testing.T) {
	for _, tc := range []struct {
		name, doors, want string
	}{
		{"a listen address without a port", "  echo: {listen: localhost}\n", `config: front_doors.echo.listen "localhost"`},
		{"a negative body cap", "  echo: {listen: 127.0.0.1:1, max_body_bytes: -1}\n", `config: front_doors.echo.max_body_bytes`},
		{"a body cap no call fits", "  echo: {listen: 127.0.0.1:1, max_body_bytes: 16777216}\n", `config: front_doors.echo.max_body_bytes 16777216: at most 1114112`},
		{"an origin with a path", "  echo: {listen: 127.0.0.1:1, cors_origins: ['https://a.example/x']}\n", `config: front_doors.echo.cors_origins`},
		{"a kind's own key", "  echo: {listen: 127.0.0.1:1, routes: []}\n", `config: front_doors.echo.routes`},
		{"any origin without keys", "  echo: {listen: 127.0.0.1:1, cors_origins: ['*']}\n", `config: front_doors.echo.cors_origins: "*" without auth.keys`},
		{"the gRPC listener's address", "  echo: {listen: 127.0.0.1:50051}\n", `the gRPC listener's address`},
		{"the admin listener's default address", "  echo: {listen: 127.0.0.1:9464}\n", `the admin listener's address (admin.listen)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := newConfig(t, false, tc.doors)
			cfg.Listen = "127.0.0.1:50051"
			_, err := frontdoor.Load(cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Load error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestNonLoopbackDoorNeedsAuthAndTLS(t *testing.T) {
	for _, tc := range []struct {
		name     string
		keys     bool
		tls      string
		listen   string
		wantErr  string
		wantDoor bool
	}{
		{"a loopback door without keys is served", false, "", "127.0.0.1:8787", "", true},
		{"a door on every interface without keys is refused", false, "", "0.0.0.0:8787",
			`config: front_doors.echo.listen "0.0.0.0:8787" is not a loopback address and auth.keys is empty`, false},
		{"a door on a host name without keys is refused", false, "", "gateway.example:8787", `auth.keys is empty`, false},
		{"a door with keys but without TLS is refused", true, "", "0.0.0.0:8787",
			`config: front_doors.echo.listen "0.0.0.0:8787" is not a loopback address and tls is not configured`, false},
		{"a door with keys behind a TLS proxy is served", true, "tls: {allow_plaintext: true}\n", "0.0.0.0:8787", "", true},
		{"a door with keys and TLS is served", true, "tls: {cert_file: c.pem, key_file: k.pem}\n", "0.0.0.0:8787", "", true},
		{"a door with half a TLS pair is refused", true, "tls: {cert_file: c.pem}\n", "0.0.0.0:8787", "config: tls: give both cert_file and key_file", false},
		{"a door that authenticates callers itself, without keys and without TLS, is refused", false, "", "0.0.0.0:8787" + authDoor,
			`config: front_doors.echo.listen "0.0.0.0:8787" is not a loopback address and tls is not configured`, false},
		{"a door that authenticates callers itself, without keys, with TLS, is served", false,
			"tls: {cert_file: c.pem, key_file: k.pem}\n", "0.0.0.0:8787" + authDoor, "", true},
		{"a door that authenticates callers itself may allow any origin without keys", false,
			"tls: {allow_plaintext: true}\n", "0.0.0.0:8787" + authDoor + corsAny, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listen, extra, _ := strings.Cut(tc.listen, " ")
			cfg := newConfig(t, tc.keys, "  echo: {listen: '"+listen+"'"+extra+"}\n")
			if tc.tls != "" {
				extra, err := config.ParseConfig([]byte(tc.tls))
				if err != nil {
					t.Fatal(err)
				}
				cfg.TLS = extra.TLS
			}
			doors, err := frontdoor.Load(cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Load error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(doors) != 1 {
				t.Fatalf("Load = %v, %v; want the door on", doors, err)
			}
		})
	}
}

// authDoor and corsAny, appended after a space to a listen address of
// TestNonLoopbackDoorNeedsAuthAndTLS, are more keys of the door: one that
// authenticates callers itself, any origin.
const (
	authDoor = " , tokens: {tok: carol}"
	corsAny  = ", cors_origins: ['*']"
)

func TestDoorAuthCoversItsAddressOnly(t *testing.T) {
	tlsCfg, err := config.ParseConfig([]byte("tls: {allow_plaintext: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	t.Run("a door sharing the address of a door that authenticates callers is served without keys", func(t *testing.T) {
		cfg := newConfig(t, false, "  echo: {listen: '0.0.0.0:8787', tokens: {tok: carol}}\n  mirror: {listen: '0.0.0.0:8787'}\n")
		cfg.TLS = tlsCfg.TLS
		if doors, err := frontdoor.Load(cfg); err != nil || len(doors) != 2 {
			t.Fatalf("Load = %v, %v", doors, err)
		}
	})
	t.Run("a door on another address than the door that authenticates callers is refused without keys", func(t *testing.T) {
		cfg := newConfig(t, false, "  echo: {listen: '0.0.0.0:8787', tokens: {tok: carol}}\n  mirror: {listen: '0.0.0.0:8788'}\n")
		cfg.TLS = tlsCfg.TLS
		_, err := frontdoor.Load(cfg)
		if err == nil || !strings.Contains(err.Error(), `front_doors.mirror.listen "0.0.0.0:8788" is not a loopback address and auth.keys is empty`) {
			t.Fatalf("Load error = %v", err)
		}
	})
}

func TestDoorsOnOneAddressShareAListener(t *testing.T) {
	shared := anyLoopbackPort
	s := serve(t, newConfig(t, false, "  echo: {listen: '"+shared+"'}\n  mirror: {listen: '"+shared+"'}\n"))
	base := s.url(t, shared)
	for _, door := range []string{"echo", "mirror"} {
		status, got, raw, _ := do(t, "GET", base+"/"+door, nil, "")
		if status != 200 || got.Door != door {
			t.Fatalf("GET /%s on the shared listener: %d %s", door, status, raw)
		}
	}
	t.Run("doors on different addresses listen apart", func(t *testing.T) {
		a, b := anyLoopbackPort, anyOtherLoopbackPort
		s := serve(t, newConfig(t, false, "  echo: {listen: '"+a+"'}\n  mirror: {listen: '"+b+"'}\n"))
		if status, _, _, _ := do(t, "GET", s.url(t, a)+"/mirror", nil, ""); status != 404 {
			t.Fatalf("mirror's route on echo's listener: %d, want 404", status)
		}
		if status, got, _, _ := do(t, "GET", s.url(t, b)+"/mirror", nil, ""); status != 200 || got.Door != "mirror" {
			t.Fatalf("mirror's own listener: %d", status)
		}
	})
}

func TestRouteConflictIsALoadError(t *testing.T) {
	free := freePort(t)
	cfg := newConfig(t, false, "  echo: {listen: '"+free+"', routes: ['GET /health']}\n  mirror: {listen: '"+free+"', routes: ['GET /health']}\n")
	g, closer, err := gateway.Build(context.Background(), cfg, getenv, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	doors, err := frontdoor.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := frontdoor.Serve(context.Background(), cfg, g, doors, nil)
	if err == nil {
		srv.Shutdown(context.Background())
		t.Fatal("two doors serving GET /health on one address were both served")
	}
	for _, want := range []string{"front_doors.mirror", "front_doors.echo", "GET /health"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	// Nothing was left listening.
	lis, lerr := net.Listen("tcp", free)
	if lerr != nil {
		t.Fatalf("the address is still taken after the failed start: %v", lerr)
	}
	lis.Close()

	t.Run("a door clashing with itself is blamed on itself", func(t *testing.T) {
		cfg := newConfig(t, false, "  echo: {listen: '"+free+"', routes: ['GET /a', 'GET /a']}\n")
		doors, err := frontdoor.Load(cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = frontdoor.Serve(context.Background(), cfg, g, doors, nil)
		if err == nil || !strings.Contains(err.Error(), "front_doors.echo: its routes conflict with each other") {
			t.Fatalf("Serve error = %v", err)
		}
	})
	t.Run("the same route on two addresses is no conflict", func(t *testing.T) {
		a, b := anyLoopbackPort, anyOtherLoopbackPort
		serve(t, newConfig(t, false, "  echo: {listen: '"+a+"', routes: ['GET /health']}\n  mirror: {listen: '"+b+"', routes: ['GET /health']}\n"))
	})
}

// Doors in the tests listen on port 0 and the tests ask the server where
// they are: a port chosen beforehand can be taken by another process
// before the door binds it. Two doors on different addresses take two
// loopback addresses.
const (
	anyLoopbackPort      = "127.0.0.1:0"
	anyOtherLoopbackPort = "127.0.0.2:0"
)

// freePort returns a loopback address nothing listens on right now, for
// the one test that must find the port free again after a failed start.
func freePort(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

func TestKindsAreListedSorted(t *testing.T) {
	if k := frontdoor.Kinds(); !slices.IsSorted(k) || !slices.Contains(k, "echo") {
		t.Fatalf("Kinds() = %v", k)
	}
}
