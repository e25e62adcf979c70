// Package evidencetest runs a real MinIO server for tests of code that
// keeps evidence in S3, in the way net/http/httptest runs an HTTP server.
//
// The minio binary must be on PATH; bash .ci/test.sh installs the pinned
// version. Tests that need it fail, rather than skip, when it is missing,
// so that the S3 backend can never go untested unnoticed.
package evidencetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Region is the region MinIO runs as and URL and Env name.
const Region = "us-east-1"

const (
	readyTimeout = 30 * time.Second // a cold start on a loaded CI machine
	stopTimeout  = 5 * time.Second  // after SIGTERM, before SIGKILL
	pollInterval = 20 * time.Millisecond
)

// MinIO is a MinIO server listening on 127.0.0.1 with its data in a
// temporary directory. Its methods are meant for the test goroutine; they
// are not safe for concurrent use with each other, but the server itself
// serves any number of concurrent clients.
type MinIO struct {
	// Endpoint is the server's base URL, "http://127.0.0.1:PORT".
	Endpoint string
	// AccessKey and SecretKey are the server's root credentials.
	AccessKey, SecretKey string

	addr, consoleAddr, dir string
	client                 *s3.Client
	cmd                    *exec.Cmd
	exited                 chan struct{} // closed when cmd has been waited for
	output                 *syncBuffer   // everything every run of the server printed
}

// StartMinIO starts a MinIO server for the rest of the test and waits
// until it serves requests. The server is stopped, and its data removed,
// when the test ends; if the test failed, the server's output is logged.
func StartMinIO(t testing.TB) *MinIO {
	t.Helper()
	if _, err := exec.LookPath("minio"); err != nil {
		t.Fatalf("minio is not on PATH (%v): run the tests through bash .ci/test.sh, which installs the pinned MinIO", err)
	}
	m := &MinIO{
		AccessKey: "toolgate-test",
		SecretKey: rand.Text(),
		addr:      freeAddr(t),
		// The console is off, but the server still wants an address for it;
		// a fixed default could clash with another server.
		consoleAddr: freeAddr(t),
		dir:         t.TempDir(),
		output:      &syncBuffer{},
	}
	m.connect()
	// Registered after TempDir, so it runs before the directory is removed.
	t.Cleanup(func() {
		m.stop(t)
		if t.Failed() {
			t.Logf("MinIO output:\n%s", m.output.String())
		}
	})
	// The ports were free a moment ago; under parallel tests another
	// process may take one first. Then the server starts on fresh ones.
	for attempt := 1; ; attempt++ {
		err := m.start()
		if err == nil {
			return m
		}
		m.stop(t)
		if attempt == maxStartAttempts || !errors.Is(err, errPortTaken) {
			t.Fatalf("MinIO did not become ready: %v\nMinIO output:\n%s", err, m.output.String())
		}
		m.addr, m.consoleAddr = freeAddr(t), freeAddr(t)
		m.connect()
	}
}

// maxStartAttempts bounds the fresh ports StartMinIO tries.
const maxStartAttempts = 3

// errPortTaken is a start that found one of its ports taken.
var errPortTaken = errors.New("a port was taken by another process")

// connect points m's endpoint and client at m.addr.
func (m *MinIO) connect() {
	m.Endpoint = "http://" + m.addr
	m.client = s3.New(s3.Options{
		Region:       Region,
		BaseEndpoint: aws.String(m.Endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(m.AccessKey, m.SecretKey, ""),
		// Tests read objects written without a checksum on purpose.
		DisableLogOutputChecksumValidationSkipped: true,
	})
}

// freeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago. Another process could take it before the server does: StartMinIO
// then tries fresh ports.
func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Start starts the server again after Stop, on the same address and with
// the same data, and waits until it serves requests.
func (m *MinIO) Start(t testing.TB) {
	t.Helper()
	if m.cmd != nil {
		t.Fatal("evidencetest: MinIO.Start: the server is already running")
	}
	if err := m.start(); err != nil {
		m.stop(t)
		t.Fatalf("MinIO did not become ready: %v\nMinIO output:\n%s", err, m.output.String())
	}
}

// start starts the server and waits until it serves this server's
// credentials.
func (m *MinIO) start() error {
	cmd := exec.Command("minio", "server", "--quiet",
		"--address", m.addr, "--console-address", m.consoleAddr, m.dir)
	cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+m.AccessKey,
		"MINIO_ROOT_PASSWORD="+m.SecretKey,
		"MINIO_BROWSER=off",
		"MINIO_UPDATE=off",
	)
	fmt.Fprintf(m.output, "--- minio server on %s\n", m.addr)
	cmd.Stdout = m.output
	cmd.Stderr = m.output
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start minio: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait()
		fmt.Fprintf(m.output, "--- minio exited: %v\n", err)
		close(exited)
	}()
	m.cmd, m.exited = cmd, exited
	if err := m.waitReady(); err != nil {
		if strings.Contains(m.output.String(), "address already in use") {
			return fmt.Errorf("%w: %w", errPortTaken, err)
		}
		return err
	}
	// A server that took the port first answers the health check too,
	// but not this server's credentials.
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	if _, err := m.client.ListBuckets(ctx, &s3.ListBucketsInput{}); err != nil {
		return fmt.Errorf("%w: the server on %s refuses this server's credentials: %w", errPortTaken, m.addr, err)
	}
	return nil
}

// waitReady polls the cluster health endpoint, which, unlike the liveness
// one, answers 200 only once the server has loaded its storage and
// credentials and can serve S3 requests.
func (m *MinIO) waitReady() error {
	client := &http.Client{Timeout: time.Second}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := client.Get(m.Endpoint + "/minio/health/cluster")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("health check: %s", resp.Status)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %w", readyTimeout, err)
		}
		select {
		case <-m.exited:
			return errors.New("the server exited")
		case <-time.After(pollInterval):
		}
	}
}

// Stop stops the server: SIGTERM, then SIGKILL if it has not exited after
// a few seconds. Its data stays for Start.
func (m *MinIO) Stop(t testing.TB) {
	t.Helper()
	if m.cmd == nil {
		t.Fatal("evidencetest: MinIO.Stop: the server is not running")
	}
	m.stop(t)
}

// Kill ends the server with SIGKILL, as a crash or an OOM kill would: it
// gets no chance to finish requests or flush anything. Its data stays for
// Start.
func (m *MinIO) Kill(t testing.TB) {
	t.Helper()
	if m.cmd == nil {
		t.Fatal("evidencetest: MinIO.Kill: the server is not running")
	}
	if err := m.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("kill minio: %v", err)
	}
	<-m.exited
	m.cmd, m.exited = nil, nil
}

// Freeze stops the server with SIGSTOP, as a hung disk or a paused VM
// would: connections are accepted by the kernel but nothing answers. It
// returns once /proc shows every thread of the server stopped. Thaw
// resumes it; a frozen server is thawed when the test ends, before it is
// stopped.
func (m *MinIO) Freeze(t testing.TB) {
	t.Helper()
	m.signal(t, syscall.SIGSTOP, "Freeze")
	t.Cleanup(func() {
		if m.cmd != nil {
			m.cmd.Process.Signal(syscall.SIGCONT)
		}
	})
	// kill returns once the signal is sent; a thread running on another
	// CPU may still answer a request until it is stopped.
	deadline := time.Now().Add(10 * time.Second)
	for !allThreadsStopped(m.cmd.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("evidencetest: MinIO.Freeze: the server's threads did not all stop within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// allThreadsStopped reports whether every thread of process pid is in
// the stopped state ("T" in /proc/<pid>/task/<tid>/stat).
func allThreadsStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false
		}
		// The state follows the command name, which is in parentheses
		// and may itself hold spaces or parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
			return false
		}
	}
	return true
}

// Thaw resumes a server stopped by Freeze (SIGCONT).
func (m *MinIO) Thaw(t testing.TB) {
	t.Helper()
	m.signal(t, syscall.SIGCONT, "Thaw")
}

func (m *MinIO) signal(t testing.TB, sig syscall.Signal, what string) {
	t.Helper()
	if m.cmd == nil {
		t.Fatalf("evidencetest: MinIO.%s: the server is not running", what)
	}
	if err := m.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("evidencetest: MinIO.%s: %v", what, err)
	}
}

// stop stops the server if it is running.
func (m *MinIO) stop(t testing.TB) {
	t.Helper()
	if m.cmd == nil {
		return
	}
	defer func() { m.cmd, m.exited = nil, nil }()
	if err := m.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("stop minio: %v", err)
	}
	select {
	case <-m.exited:
		return
	case <-time.After(stopTimeout):
	}
	t.Logf("MinIO did not exit within %v of SIGTERM; killing it", stopTimeout)
	if err := m.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("kill minio: %v", err)
	}
	<-m.exited
}

// Client returns an S3 client for the server, with its root credentials,
// for tests that inspect or arrange objects directly.
func (m *MinIO) Client() *s3.Client {
	return m.client
}

// CreateBucket creates a bucket, with object lock enabled if objectLock is
// true (which also turns on versioning, as S3 requires).
func (m *MinIO) CreateBucket(t testing.TB, name string, objectLock bool) {
	t.Helper()
	in := &s3.CreateBucketInput{Bucket: aws.String(name)}
	if objectLock {
		in.ObjectLockEnabledForBucket = aws.Bool(true)
	}
	if _, err := m.client.CreateBucket(context.Background(), in); err != nil {
		t.Fatalf("create bucket %q: %v", name, err)
	}
}

// URL returns the evidence store URL of bucket and prefix on this server.
func (m *MinIO) URL(bucket, prefix string) string {
	return fmt.Sprintf("s3://%s/%s?endpoint=%s&region=%s&path_style=true", bucket, prefix, m.Endpoint, Region)
}

// Env returns environment variables that point the standard AWS
// credential chain of a child process at this server's credentials and
// region, and clear those that would point it elsewhere.
func (m *MinIO) Env() []string {
	return []string{
		"AWS_ACCESS_KEY_ID=" + m.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + m.SecretKey,
		"AWS_REGION=" + Region,
		"AWS_SESSION_TOKEN=",
		"AWS_PROFILE=",
		"AWS_ENDPOINT_URL=",
		"AWS_ENDPOINT_URL_S3=",
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// SetEnv sets the variables of Env in the test's own process, for stores
// opened in the test, until the test ends. Like t.Setenv, it cannot be
// used in parallel tests.
func (m *MinIO) SetEnv(t testing.TB) {
	t.Helper()
	for _, kv := range m.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// syncBuffer is a bytes.Buffer that the server's output copiers and the
// test goroutine can use at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
