// Package groupsync shares durable syncs among concurrent callers: group
// commit. A caller that asks for a name to be synced while a sync of that
// name is running waits for the next sync, which starts once the running
// one ends and covers every caller that asked meanwhile. So under load the
// number of syncs per name is bounded by the time one takes, not by the
// number of callers, and no caller is told it is durable by a sync that
// began before it asked.
package groupsync

import (
	"context"
	"sync"
)

// Group syncs names through its sync function, one sync of a name at a
// time, shared by every caller waiting for that name. Different names are
// synced concurrently. The zero Group is not usable; use New.
type Group struct {
	sync func(name string) error

	mu    sync.Mutex
	names map[string]*state // only names with a sync running or waiting
}

// state is one name's syncs: whether one is running, and the round that
// runs next, which callers join until it starts.
type state struct {
	running bool
	next    *round
}

// round is one sync and the callers it covers.
type round struct {
	done chan struct{}
	err  error
}

// New returns a Group that calls sync to make a name durable, such as
// fsync on a directory opened by that name.
func New(sync func(name string) error) *Group {
	return &Group{sync: sync, names: map[string]*state{}}
}

// Sync returns once a sync of name that started after this call began has
// ended, with that sync's error. When ctx ends first it returns ctx's
// error; the sync still happens, for the other callers.
func (g *Group) Sync(ctx context.Context, name string) error {
	g.mu.Lock()
	st := g.names[name]
	if st == nil {
		st = &state{}
		g.names[name] = st
	}
	if st.next == nil {
		st.next = &round{done: make(chan struct{})}
	}
	r := st.next
	lead := !st.running
	if lead {
		// No sync is running: this caller runs the round now, and
		// callers from here on wait for the one after.
		st.running, st.next = true, nil
	}
	g.mu.Unlock()
	if lead {
		g.run(name, st, r)
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run performs round r of name, then starts the round its callers joined
// meanwhile, if any, on a goroutine of its own: the leader of r returns as
// soon as its own sync is done.
func (g *Group) run(name string, st *state, r *round) {
	r.err = g.sync(name)
	close(r.done)
	g.mu.Lock()
	next := st.next
	if next == nil {
		st.running = false
		delete(g.names, name)
		g.mu.Unlock()
		return
	}
	st.next = nil
	g.mu.Unlock()
	go g.run(name, st, next)
}
