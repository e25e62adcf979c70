package execbox

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Backoff of the pool after a runner failed to start or died while idle,
// so that a broken runner command does not turn into a fork loop.
const (
	poolBackoffStart = 100 * time.Millisecond
	poolBackoffMax   = 5 * time.Second
)

// pool keeps runner processes started ahead of the sessions that will use
// them: a runner takes 0.5–1.5 s to start, which a waiting call should not
// pay. Each process serves one session and is never reused.
type pool struct {
	cmd  *command
	size int
	log  *slog.Logger
	stop chan struct{} // closed by close
	wg   sync.WaitGroup

	mu       sync.Mutex
	idle     []*stdioProc // oldest first
	starting int          // starts scheduled or in progress
	failures int          // consecutive failed starts and idle deaths
	closed   bool
}

// newPool returns a pool that starts filling at once.
func newPool(cmd *command, size int, log *slog.Logger) *pool {
	p := &pool{cmd: cmd, size: size, log: log, stop: make(chan struct{})}
	p.refill()
	return p
}

// get returns a live idle process, or starts one when none is ready. A
// process whose stdout ended while it waited is discarded, never handed
// out.
func (p *pool) get(ctx context.Context) (*stdioProc, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errClosed
		}
		if len(p.idle) == 0 {
			p.mu.Unlock()
			p.refill()
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			return p.cmd.start()
		}
		proc := p.idle[0]
		p.idle = p.idle[1:]
		p.mu.Unlock()

		close(proc.claimed)
		<-proc.monitorDone
		if proc.dead {
			proc.close(true)
			continue
		}
		p.mu.Lock()
		p.failures = 0
		p.mu.Unlock()
		p.refill()
		return proc, nil
	}
}

// refill schedules starts until idle and starting processes make up the
// pool's size.
func (p *pool) refill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for !p.closed && len(p.idle)+p.starting < p.size {
		p.starting++
		delay := time.Duration(0)
		if p.failures > 0 {
			delay = min(poolBackoffStart<<min(p.failures-1, 16), poolBackoffMax)
		}
		p.wg.Add(1)
		go p.startOne(delay)
	}
}

// startOne starts one process after delay and puts it in the pool.
func (p *pool) startOne(delay time.Duration) {
	defer p.wg.Done()
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-p.stop:
			t.Stop()
			p.mu.Lock()
			p.starting--
			p.mu.Unlock()
			return
		}
	}
	proc, err := p.cmd.start()
	p.mu.Lock()
	p.starting--
	switch {
	case err != nil:
		p.failures++
		p.mu.Unlock()
		p.log.Warn("execbox runner did not start", "error", err)
		p.refill()
		return
	case p.closed:
		p.mu.Unlock()
		proc.close(true)
		return
	}
	p.idle = append(p.idle, proc)
	p.wg.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.wg.Done()
		p.monitor(proc)
	}()
}

// monitor watches an idle process until a session claims it. A runner has
// nothing to say before execute, so a line is logged and dropped; the end
// of stdout means the process died, and it is replaced.
func (p *pool) monitor(proc *stdioProc) {
	defer close(proc.monitorDone)
	for {
		select {
		case _, ok := <-proc.lines:
			if ok {
				p.log.Warn("execbox runner wrote to stdout before execute; line dropped", "pid", proc.cmd.Process.Pid)
				continue
			}
			proc.dead = true
			p.mu.Lock()
			removed := false
			for i, q := range p.idle {
				if q == proc {
					p.idle = append(p.idle[:i:i], p.idle[i+1:]...)
					removed = true
					break
				}
			}
			if removed {
				p.failures++
			}
			p.mu.Unlock()
			if removed {
				// Otherwise get claimed it meanwhile and closes it.
				err := proc.close(true)
				p.log.Warn("execbox runner died in the pool", "pid", proc.cmd.Process.Pid, "error", err)
				p.refill()
			}
			return
		case <-proc.claimed:
			return
		}
	}
}

// close kills the idle processes and waits for the pool's goroutines.
func (p *pool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	close(p.stop)
	p.mu.Unlock()
	for _, proc := range idle {
		proc.close(true)
	}
	p.wg.Wait()
}
