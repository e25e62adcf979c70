package policy

import (
	"strconv"
	"strings"
	"sync"

	"github.com/cedar-policy/cedar-go/types"
)

// maxCachedEntities bounds each of an Engine's entity caches. A caller
// name and its groups can come from a token, so the caller cache is keyed
// on what callers choose: past the bound, entities are built per call
// again, which costs time, never memory or a wrong decision.
const maxCachedEntities = 4096

// entityCache keeps the Caller and Tool entities an Engine has built, so
// that a decision does not rebuild (and re-hash, and copy) the same Cedar
// records on every call. An entry's key encodes everything its entity is
// built from, so a hit is the entity that would have been built: a
// caller's entity is never served for a different name, groups or roles.
// Each Engine has its own cache, so a reload starts empty. The zero value
// is not used; a nil *entityCache caches nothing.
type entityCache struct {
	mu      sync.RWMutex
	callers map[string]types.Entity
	tools   map[string]types.Entity
}

func newEntityCache() *entityCache {
	return &entityCache{callers: make(map[string]types.Entity), tools: make(map[string]types.Entity)}
}

// caller returns the Caller entity of name with attrs.
func (c *entityCache) caller(uid types.EntityUID, name string, attrs CallerAttributes) types.Entity {
	if c == nil {
		return callerEntity(uid, attrs)
	}
	var k keyBuilder
	k.add(name)
	k.list(attrs.Groups)
	k.list(attrs.Roles)
	return c.get(c.callers, k.String(), func() types.Entity { return callerEntity(uid, attrs) })
}

// tool returns the Tool entity of toolID, a member of driverName.
func (c *entityCache) tool(uid, driver types.EntityUID, toolID, driverName string, t ToolAttributes) types.Entity {
	if c == nil {
		return toolEntity(uid, driver, driverName, t)
	}
	var k keyBuilder
	for _, s := range []string{toolID, driverName, t.Package, t.Export, t.Version} {
		k.add(s)
	}
	k.list(t.Tags)
	return c.get(c.tools, k.String(), func() types.Entity { return toolEntity(uid, driver, driverName, t) })
}

// get returns m's entity under key, building and keeping it while m holds
// fewer than maxCachedEntities.
func (c *entityCache) get(m map[string]types.Entity, key string, build func() types.Entity) types.Entity {
	c.mu.RLock()
	ent, ok := m[key]
	c.mu.RUnlock()
	if ok {
		return ent
	}
	ent = build()
	c.mu.Lock()
	if len(m) < maxCachedEntities {
		m[key] = ent
	}
	c.mu.Unlock()
	return ent
}

// keyBuilder writes strings length-prefixed, so that no two different
// inputs give the same key whatever bytes they hold.
type keyBuilder struct{ strings.Builder }

func (k *keyBuilder) add(s string) {
	k.WriteString(strconv.Itoa(len(s)))
	k.WriteByte(':')
	k.WriteString(s)
}

func (k *keyBuilder) list(items []string) {
	k.add(strconv.Itoa(len(items)))
	for _, s := range items {
		k.add(s)
	}
}

// requestEntities are the three entities of a request, looked up without a
// map: the principal, the tool and the tool's driver.
type requestEntities struct {
	principal, tool, driver types.Entity
}

// Get implements types.EntityGetter.
func (r *requestEntities) Get(uid types.EntityUID) (types.Entity, bool) {
	for _, e := range [...]*types.Entity{&r.principal, &r.tool, &r.driver} {
		if e.UID == uid {
			return *e, true
		}
	}
	return types.Entity{}, false
}
