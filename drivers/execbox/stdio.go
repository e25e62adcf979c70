package execbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Stdio limits.
const (
	// stderrTail is how much of a runner's stderr is kept for diagnostics.
	stderrTail = 16 << 10
	// stderrLogged is how much of that tail a log line quotes.
	stderrLogged = 2 << 10
	// linesBuffered is how many stdout messages may wait for the session.
	linesBuffered = 16
	// stderrGrace is how long close waits, once the runner's process group
	// is dead, for its stderr to reach the end. Only a descendant that left
	// the group can hold the pipe open longer; its output is not waited for.
	stderrGrace = time.Second
)

// runnerEnvKeys are the only variables of the gateway's environment a
// runner process receives. The gateway's environment holds the secrets it
// resolves for tools; the runner is not trusted with any of them.
var runnerEnvKeys = [...]string{"PATH", "HOME", "TMPDIR", "LANG"}

// runnerEnv returns the environment of runner processes.
func runnerEnv() []string {
	var env []string
	for _, k := range runnerEnvKeys {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// command is a runner program to start per session.
type command struct {
	path       string // resolved Command[0]
	args       []string
	env        []string
	maxMessage int
	log        *slog.Logger
}

// stdioProc is one runner process; its session speaks one JSON object per
// line on the process's stdin and stdout.
type stdioProc struct {
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *os.File
	errOut *os.File
	log    *slog.Logger

	// lines delivers stdout messages; it is closed when stdout ends, after
	// readErr is set.
	lines   chan []byte
	readErr error
	stderr  tailBuffer
	// stderrDone is closed when stderr has been read to its end.
	stderrDone chan struct{}
	quit       chan struct{} // closed by close: stop delivering lines
	readers    sync.WaitGroup

	// Pool bookkeeping: claimed is closed when a session takes the
	// process; monitorDone when the pool's monitor let go of lines; dead is
	// set by the monitor before that when stdout ended while idle.
	claimed     chan struct{}
	monitorDone chan struct{}
	dead        bool

	closeOnce sync.Once
	closeErr  error
}

// start starts a runner process. Its pipes are the package's own *os.File
// ends, so that closing them unblocks any reader whatever became of the
// process and its children.
func (c *command) start() (*stdioProc, error) {
	var files []*os.File
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err == nil {
			files = append(files, r, w)
		}
		return r, w, err
	}
	inR, inW, err := pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		closeAll()
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:        c.path,
		Args:        append([]string{c.path}, c.args...),
		Env:         c.env,
		Stdin:       inR,
		Stdout:      outW,
		Stderr:      errW,
		SysProcAttr: runnerProcAttr(),
	}
	if err := cmd.Start(); err != nil {
		closeAll()
		return nil, err
	}
	// The child holds its own copies now.
	inR.Close()
	outW.Close()
	errW.Close()

	p := &stdioProc{
		cmd: cmd, stdin: inW, stdout: outR, errOut: errR, log: c.log,
		lines:       make(chan []byte, linesBuffered),
		quit:        make(chan struct{}),
		claimed:     make(chan struct{}),
		monitorDone: make(chan struct{}),
		stderr:      tailBuffer{limit: stderrTail},
		stderrDone:  make(chan struct{}),
	}
	p.readers.Add(2)
	go func() {
		defer p.readers.Done()
		p.readLines(c.maxMessage)
	}()
	go func() {
		defer p.readers.Done()
		defer close(p.stderrDone)
		io.Copy(&p.stderr, errR)
	}()
	return p, nil
}

// readLines delivers stdout, one message per non-empty line.
func (p *stdioProc) readLines(maxMessage int) {
	defer close(p.lines)
	br := bufio.NewReaderSize(p.stdout, 64<<10)
	for {
		line, err := readLine(br, maxMessage)
		if len(line) > 0 {
			select {
			case p.lines <- line:
			case <-p.quit:
				p.readErr = os.ErrClosed
				return
			}
		}
		if err != nil {
			p.readErr = err
			return
		}
	}
}

// readLine reads one line without its line break. A line longer than
// maxMessage is an error wrapping errMessageTooLarge; the rest of the stream
// is then unusable. At the end of the stream it returns what is left of an
// unterminated last line with the error.
func readLine(br *bufio.Reader, maxMessage int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > maxMessage+2 { // room for "\r\n"
			return nil, fmt.Errorf("%w of %d bytes", errMessageTooLarge, maxMessage)
		}
		line = append(line, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) > maxMessage {
			return nil, fmt.Errorf("%w of %d bytes", errMessageTooLarge, maxMessage)
		}
		if err == nil && len(bytes.TrimSpace(line)) == 0 {
			line = line[:0]
			continue
		}
		return line, err
	}
}

func (p *stdioProc) send(msg []byte) error {
	// One write per message keeps the line whole; json.Marshal never
	// emits a raw line break inside a message.
	buf := make([]byte, 0, len(msg)+1)
	buf = append(append(buf, msg...), '\n')
	n, err := p.stdin.Write(buf)
	if err != nil && n == 0 {
		// Not a byte entered the pipe (its reading end is closed: the
		// runner closed its stdin or exited), so the runner cannot
		// have read any of the message.
		return fmt.Errorf("%w: %w", errNothingSent, err)
	}
	return err
}

func (p *stdioProc) recv() ([]byte, error) {
	b, ok := <-p.lines
	if !ok {
		if errors.Is(p.readErr, io.EOF) {
			return nil, errors.New("runner closed its stdout")
		}
		return nil, p.readErr
	}
	return b, nil
}

// close kills the runner's whole process group, reaps the runner and
// releases the pipes. There is no polite variant: a runner serves one
// session and its work is over. The error tells how the runner ended when
// it ended on its own before the kill.
func (p *stdioProc) close(bool) error {
	p.closeOnce.Do(func() {
		close(p.quit)
		// The runner leads its own process group, and it has not been
		// reaped yet, so the group id cannot belong to anybody else.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		waitErr := p.cmd.Wait()
		p.stdin.Close()
		p.stdout.Close()
		p.drainStderr()
		p.readers.Wait()

		tail := p.stderr.String()
		var exitErr *exec.ExitError
		switch {
		case errors.As(waitErr, &exitErr) && exitErr.Exited():
			p.closeErr = fmt.Errorf("runner process exited with status %d", exitErr.ExitCode())
		case errors.As(waitErr, &exitErr):
			if ws, ok := exitErr.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() != syscall.SIGKILL {
				p.closeErr = fmt.Errorf("runner process was killed by %v", ws.Signal())
			}
		case waitErr != nil:
			p.closeErr = fmt.Errorf("runner process: %w", waitErr)
		}
		if tail != "" {
			level := slog.LevelDebug
			if p.closeErr != nil {
				level = slog.LevelWarn
			}
			if len(tail) > stderrLogged {
				tail = "…" + tail[len(tail)-stderrLogged:]
			}
			p.log.Log(context.Background(), level, "execbox runner stderr", "pid", p.cmd.Process.Pid, "stderr", cleanText(tail, stderrLogged+8))
		}
	})
	return p.closeErr
}

// drainStderr lets the stderr reader take what the dead runner left in the
// pipe before closing it: closing the reading end first would drop the very
// lines that say why the runner died.
func (p *stdioProc) drainStderr() {
	grace := time.NewTimer(stderrGrace)
	defer grace.Stop()
	select {
	case <-p.stderrDone:
	case <-grace.C:
	}
	p.errOut.Close()
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	mu    sync.Mutex
	limit int
	buf   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the kept bytes.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
