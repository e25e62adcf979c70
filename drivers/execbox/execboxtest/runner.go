package execboxtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// maxFakeMessage is the largest message the fake runner reads.
const maxFakeMessage = 64 << 20

// closeWait is how long a WebSocket session waits, after its script, for
// the host to close the connection before dropping it.
const closeWait = 2 * time.Second

// sessionsWait bounds how long Sessions waits for WebSocket sessions still
// in progress.
const sessionsWait = 5 * time.Second

// scriptFlag names the script file on a stdio runner's command line.
const scriptFlag = "-execboxtest.script="

// Runner is a fake runner that plays a script on every session.
type Runner struct {
	// URL is the WebSocket endpoint of a runner made by NewWS or ServeWS.
	URL string
	// Command starts a stdio runner process; set by NewStdio.
	Command []string

	dir string // stdio: the directory of the script and the transcripts

	mu       sync.Mutex
	sessions []*Session // WebSocket sessions, in the order they started
	active   int        // WebSocket sessions in progress
}

// NewWS starts a WebSocket runner that plays script on every connection.
// It stops when the test ends.
func NewWS(t testing.TB, script Script) *Runner {
	t.Helper()
	return newWS(t, script.Play)
}

// ServeWS starts a WebSocket runner on which every connection runs script
// once execute arrived, and returns its ws:// URL. It stops when the test
// ends.
func ServeWS(t testing.TB, script func(s *Session)) (url string) {
	t.Helper()
	return newWS(t, script).URL
}

func newWS(t testing.TB, play func(*Session)) *Runner {
	r := &Runner{}
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c, err := websocket.Accept(w, req, nil)
		if err != nil {
			return
		}
		c.SetReadLimit(maxFakeMessage)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := newSession(&wsConn{c: c, ctx: ctx}, nil, stop)
		r.mu.Lock()
		r.sessions = append(r.sessions, s)
		r.active++
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.active--
			r.mu.Unlock()
		}()

		s.serve(play)
		if !s.hasCrashed() {
			// Leave the close to the host, as a runner server does.
			s.wait(func() bool { return s.closed }, closeWait)
		}
		c.CloseNow()
	}))
	t.Cleanup(func() {
		close(stop)
		srv.Close()
	})
	r.URL = "ws" + strings.TrimPrefix(srv.URL, "http")
	return r
}

// wsConn is the fake runner's side of a WebSocket session.
type wsConn struct {
	c   *websocket.Conn
	ctx context.Context
}

func (w *wsConn) send(msg []byte) error { return w.c.Write(w.ctx, websocket.MessageText, msg) }

func (w *wsConn) recv() ([]byte, error) {
	_, b, err := w.c.Read(w.ctx)
	return b, err
}

// NewStdio prepares a stdio runner that plays script in every process
// started with its Command. The test binary must call MaybeRunStdioRunner
// in TestMain.
func NewStdio(t testing.TB, script Script) *Runner {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("execboxtest: locate the test binary: %v", err)
	}
	b, err := encodeScript(script)
	if err != nil {
		t.Fatalf("execboxtest: encode script: %v", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "script.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatalf("execboxtest: write script: %v", err)
	}
	return &Runner{Command: []string{exe, scriptFlag + path}, dir: dir}
}

// StdioCommand returns a command that starts a stdio runner playing
// script; see NewStdio.
func StdioCommand(t testing.TB, script Script) []string {
	t.Helper()
	return NewStdio(t, script).Command
}

// Sessions returns the messages each session received, for sessions that
// received anything. WebSocket sessions are listed in the order they
// started, after waiting a while for those in progress; stdio sessions are
// read from the transcripts of processes that have been killed or exited.
func (r *Runner) Sessions() [][]Message {
	if r.dir != "" {
		return readTranscripts(r.dir)
	}
	deadline := time.Now().Add(sessionsWait)
	for {
		r.mu.Lock()
		active, sessions := r.active, append([]*Session(nil), r.sessions...)
		r.mu.Unlock()
		if active == 0 || time.Now().After(deadline) {
			var out [][]Message
			for _, s := range sessions {
				if got := s.Received(); len(got) > 0 {
					out = append(out, got)
				}
			}
			return out
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Starts returns how many WebSocket connections the runner accepted, or
// how many stdio runner processes started.
func (r *Runner) Starts() int {
	if r.dir != "" {
		names, _ := filepath.Glob(filepath.Join(r.dir, "started-*"))
		return len(names)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sessions)
}

// hasCrashed reports whether the session's script ended with Crash.
func (s *Session) hasCrashed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.crashed
}

// readTranscripts reads the transcript files of a stdio runner.
func readTranscripts(dir string) [][]Message {
	names, _ := filepath.Glob(filepath.Join(dir, "transcript-*.jsonl"))
	var out [][]Message
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		var msgs []Message
		for line := range bytes.SplitSeq(b, []byte("\n")) {
			if len(line) > 0 {
				msgs = append(msgs, decodeMessage(line))
			}
		}
		if len(msgs) > 0 {
			out = append(out, msgs)
		}
	}
	return out
}

// MaybeRunStdioRunner runs the stdio runner and exits when the process was
// started by a command from NewStdio or StdioCommand; otherwise it returns
// at once. Call it first in TestMain.
func MaybeRunStdioRunner() {
	for _, arg := range os.Args[1:] {
		if path, ok := strings.CutPrefix(arg, scriptFlag); ok {
			// syscall.Exit, not os.Exit: a binary built with -race
			// sleeps a second in os.Exit, and the process's end is
			// part of what the host under test observes. The runner
			// buffers nothing that would need flushing.
			syscall.Exit(runStdio(path))
		}
	}
}

// runStdio plays the script in path on stdin and stdout and returns the
// process's exit status.
func runStdio(path string) int {
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "execboxtest runner:", err)
		return 2
	}
	script, err := decodeScript(data)
	if err != nil {
		fmt.Fprintln(os.Stderr, "execboxtest runner: script:", err)
		return 2
	}
	dir, pid := filepath.Dir(path), strconv.Itoa(os.Getpid())
	if err := os.WriteFile(filepath.Join(dir, "started-"+pid), nil, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "execboxtest runner:", err)
		return 2
	}
	if len(script) > 0 && script[0].op == opExitBeforeFirst {
		f, err := os.OpenFile(filepath.Join(dir, "exited-once"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err == nil {
			f.Close()
			return 0
		}
	}
	transcript, err := os.OpenFile(filepath.Join(dir, "transcript-"+pid+".jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "execboxtest runner:", err)
		return 2
	}
	defer transcript.Close()
	record := func(b []byte) {
		// One write per line: the process may be killed at any moment.
		transcript.Write(append(b[:len(b):len(b)], '\n'))
	}
	s := newSession(&stdioConn{r: bufio.NewReaderSize(os.Stdin, 1<<20), w: os.Stdout}, record, nil)
	s.serve(script.Play)
	if s.hasCrashed() {
		return 3
	}
	return 0
}

// stdioConn is the fake runner's side of a stdio session.
type stdioConn struct {
	r      *bufio.Reader
	w      *os.File
	readMu sync.Mutex
}

func (c *stdioConn) send(msg []byte) error {
	_, err := c.w.Write(append(msg[:len(msg):len(msg)], '\n'))
	return err
}

func (c *stdioConn) recv() ([]byte, error) {
	c.readMu.Lock()
	defer c.readMu.Unlock()
	for {
		line, err := c.r.ReadBytes('\n')
		line = bytes.TrimRight(line, "\r\n")
		if len(line) > 0 {
			return line, nil
		}
		if err != nil {
			return nil, err
		}
	}
}
