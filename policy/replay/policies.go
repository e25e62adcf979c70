package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	cedar "github.com/cedar-policy/cedar-go"

	"github.com/toolgate/toolgate/internal/regularfile"
	"github.com/toolgate/toolgate/policy"
)

// Policies is a policy folder loaded as the gateway loads it, with what
// each of its sets may read, so that a call whose record lacks something a
// set reads is not decided on a guess.
type Policies struct {
	engine *policy.Engine
	// reads holds, by policy_ref, the text of the set's policies without
	// their annotations.
	reads map[string]string
	// digests holds, by policy_ref, the digest of the set's file.
	digests map[string]string
}

// LoadPolicies loads dir with policy.Load and reads the text of its sets.
func LoadPolicies(dir string) (*Policies, error) {
	engine, err := policy.Load(dir)
	if err != nil {
		return nil, err
	}
	p := &Policies{engine: engine, reads: make(map[string]string), digests: make(map[string]string)}
	for _, ref := range engine.Refs() {
		name := ref + ".cedar"
		src, err := regularfile.Read(filepath.Join(dir, name), policy.MaxPolicyFileBytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
		}
		text, err := bareText(name, src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, name), err)
		}
		p.reads[ref] = text
		sum := sha256.Sum256(src)
		p.digests[ref] = "sha256:" + hex.EncodeToString(sum[:])
	}
	return p, nil
}

// bareText returns the policies of one file without their annotations,
// whose prose would otherwise count as reading whatever it mentions.
func bareText(name string, src []byte) (string, error) {
	set, err := cedar.NewPolicySetFromBytes(name, src)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range set.All() {
		bare := *p.AST()
		bare.Annotations = nil
		b.Write(cedar.NewPolicyFromAST(&bare).MarshalCedar())
		b.WriteByte('\n')
	}
	return b.String(), nil
}

// Decide decides c under the set its policy_ref names, as the gateway
// would have, or says why that would be a guess.
func (p *Policies) Decide(ctx context.Context, c Call) (policy.Decision, error) {
	ref := c.Request.PolicyRef
	if ref == "" {
		ref = policy.DefaultRef
	}
	if text, ok := p.reads[ref]; ok {
		if err := c.gaps.missing(text); err != nil {
			return policy.Decision{}, err
		}
	}
	return p.engine.Decide(ctx, c.Request), nil
}

// Digest returns the digest of the set ref names, "" when it is not loaded.
func (p *Policies) Digest(ref string) string {
	if ref == "" {
		ref = policy.DefaultRef
	}
	return p.digests[ref]
}

// missing returns a *NotReplayable error when a set whose policies read
// text would read something the record does not hold. The test is on the
// words of the policies: a word in a string literal counts too, which
// only ever refuses a call that could have been replayed.
func (g gaps) missing(text string) error {
	has := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(text, w) {
				return true
			}
		}
		return false
	}
	switch {
	case g.noPrincipal && has("groups", "roles"):
		return notReplayable("the record predates recorded caller attributes, and the set reads principal.groups or principal.roles")
	case g.noTool && has("package", "export", "version", "tags"):
		return notReplayable("the record predates recorded tool attributes, and the set reads the tool's package, export, version or tags")
	case g.noHistory && has("session", "caller"):
		return notReplayable("the recorded decision saw no session history (its set did not read it), and this set reads context.session or context.caller")
	}
	if !has("args") {
		return nil
	}
	if g.anyArg {
		return notReplayable("an argument was redacted before it was recorded, and the set reads context.args")
	}
	for _, k := range g.argKeys {
		if readsKey(text, k) {
			return notReplayable("argument %q was redacted before it was recorded, and the set reads it", k)
		}
	}
	return nil
}

// readsKey reports whether policies whose text mentions args may read the
// argument named key. Cedar has no computed attribute names, so a rule
// reads key only by naming it (context.args.key, has key, ["key"], or a
// record literal compared whole); a name Cedar would escape in its text is
// taken to be read.
func readsKey(text, key string) bool {
	for _, r := range key {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return true
		}
	}
	return key == "" || strings.Contains(text, key)
}

// refOf returns the effective policy_ref of c.
func refOf(c Call) string {
	if c.Request.PolicyRef == "" {
		return policy.DefaultRef
	}
	return c.Request.PolicyRef
}
