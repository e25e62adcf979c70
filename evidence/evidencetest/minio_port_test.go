package evidencetest

import (
	"errors"
	"net"
	"net/http"
	"testing"
)

// TestStartSeesItsPortTaken: another server took the port between
// freeAddr and the start, and even answers MinIO's health check. The
// start must not take it for its own server.
func TestStartSeesItsPortTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	impostor := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/minio/health/cluster" {
			w.WriteHeader(http.StatusForbidden)
		}
	})}
	go impostor.Serve(l)
	t.Cleanup(func() { impostor.Close() })

	m := &MinIO{AccessKey: "toolgate-test", SecretKey: "not-the-impostors", addr: l.Addr().String(),
		consoleAddr: freeAddr(t), dir: t.TempDir(), output: &syncBuffer{}}
	m.connect()
	err = m.start()
	m.stop(t)
	if !errors.Is(err, errPortTaken) {
		t.Fatalf("start on a taken port = %v, want errPortTaken", err)
	}
}
