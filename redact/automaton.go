package redact

// automaton finds every occurrence of a fixed set of byte strings in one left-to-right pass
// (Aho-Corasick), comparing ASCII letters case-insensitively. Callers that need an exact match
// check the bytes at each hit.
//
// It is compiled to a DFA over byte classes: bytes that occur in no pattern share one class, so
// the transition table stays small (states × classes) and each input byte costs two table loads.
// States are numbered so that those where some pattern ends come last; the scan loop needs one
// comparison per byte to know that nothing ended.
type automaton struct {
	class   [256]uint8
	nclass  int
	next    []int32   // next[state*nclass+class], already multiplied by nclass
	accept  int32     // first accepting state, multiplied by nclass
	outputs [][]int32 // per accepting state (index state-accept/nclass): the patterns ending there
	lengths []int     // per pattern
	maxLen  int       // longest pattern
}

// newAutomaton compiles patterns; pattern i is reported as i. Empty patterns are never reported.
func newAutomaton(patterns []string) *automaton {
	a := &automaton{lengths: make([]int, len(patterns))}
	// Byte classes: one per distinct (lower-cased) byte used by a pattern, class 0 for the rest.
	var used [256]bool
	for _, p := range patterns {
		for i := 0; i < len(p); i++ {
			used[foldByte(p[i])] = true
		}
	}
	// At most 230 classes: upper-case letters are folded and never counted.
	nclass := 1
	for b := 0; b < 256; b++ {
		if used[b] {
			a.class[b] = uint8(nclass)
			nclass++
		}
	}
	for b := 'A'; b <= 'Z'; b++ {
		a.class[b] = a.class[b+'a'-'A']
	}
	a.nclass = nclass

	// The trie, as goto[state][class] (-1: no edge).
	type node struct {
		edges []int32
		out   []int32
	}
	newNode := func() node {
		e := make([]int32, nclass)
		for i := range e {
			e[i] = -1
		}
		return node{edges: e}
	}
	nodes := []node{newNode()}
	for pi, p := range patterns {
		a.lengths[pi] = len(p)
		a.maxLen = max(a.maxLen, len(p))
		if p == "" {
			continue
		}
		s := int32(0)
		for i := 0; i < len(p); i++ {
			c := a.class[p[i]]
			if nodes[s].edges[c] < 0 {
				nodes = append(nodes, newNode())
				nodes[s].edges[c] = int32(len(nodes) - 1)
			}
			s = nodes[s].edges[c]
		}
		nodes[s].out = append(nodes[s].out, int32(pi))
	}

	// Breadth-first: failure links, inherited outputs, and the full transition function.
	fail := make([]int32, len(nodes))
	delta := make([][]int32, len(nodes))
	queue := make([]int32, 0, len(nodes))
	delta[0] = make([]int32, nclass)
	for c := 0; c < nclass; c++ {
		if t := nodes[0].edges[c]; t >= 0 {
			delta[0][c] = t
			fail[t] = 0
			queue = append(queue, t)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		nodes[s].out = append(nodes[s].out, nodes[fail[s]].out...)
		delta[s] = make([]int32, nclass)
		for c := 0; c < nclass; c++ {
			if t := nodes[s].edges[c]; t >= 0 {
				delta[s][c] = t
				fail[t] = delta[fail[s]][c]
				queue = append(queue, t)
			} else {
				delta[s][c] = delta[fail[s]][c]
			}
		}
	}

	// Renumber: non-accepting states first (the start state stays 0, it never accepts).
	order := make([]int32, 0, len(nodes))
	for s := range nodes {
		if len(nodes[s].out) == 0 {
			order = append(order, int32(s))
		}
	}
	firstAccept := len(order)
	for s := range nodes {
		if len(nodes[s].out) > 0 {
			order = append(order, int32(s))
		}
	}
	renum := make([]int32, len(nodes))
	for newID, old := range order {
		renum[old] = int32(newID)
	}
	a.next = make([]int32, len(nodes)*nclass)
	for newID, old := range order {
		for c := 0; c < nclass; c++ {
			a.next[newID*nclass+c] = renum[delta[old][c]] * int32(nclass)
		}
	}
	a.accept = int32(firstAccept * nclass)
	a.outputs = make([][]int32, len(nodes)-firstAccept)
	for newID := firstAccept; newID < len(order); newID++ {
		a.outputs[newID-firstAccept] = nodes[order[newID]].out
	}
	return a
}

// hit is one pattern occurrence: text[end-length(pattern):end].
type hit struct {
	pattern int32
	end     int
}

// scan appends every occurrence of every pattern in text to hits, in order of their end.
//
// A DFA step waits for the previous one (the next state is loaded from the current one), so one
// chain runs at the latency of a memory load per byte. Longer texts are cut into four parts
// scanned in one loop: the four chains of loads are independent and the processor overlaps them.
// Each part but the first starts maxLen-1 bytes early, so that a pattern ending in it is seen
// whole, and reports only patterns ending inside it.
func (a *automaton) scan(text []byte, hits []hit) []hit {
	const minSplit = 4096
	n := len(text)
	if n < minSplit || n < 16*a.maxLen {
		hits, _ = a.scanFrom(text, 0, n, 0, 0, hits)
		return hits
	}
	var bound, from [5]int
	for j := range 5 {
		bound[j] = n * j / 4
	}
	for j := 1; j < 4; j++ {
		from[j] = bound[j] - (a.maxLen - 1)
	}
	steps := bound[1] - from[0]
	for j := 1; j < 4; j++ {
		steps = min(steps, bound[j+1]-from[j])
	}
	var parts [4][]hit
	parts[0] = hits
	next, class, accept, nclass := a.next, &a.class, a.accept, int32(a.nclass)
	var s0, s1, s2, s3 int32
	t0, t1, t2, t3 := text[from[0]:], text[from[1]:], text[from[2]:], text[from[3]:]
	for i := 0; i < steps; i++ {
		s0 = next[s0+int32(class[t0[i]])]
		s1 = next[s1+int32(class[t1[i]])]
		s2 = next[s2+int32(class[t2[i]])]
		s3 = next[s3+int32(class[t3[i]])]
		if s0|s1|s2|s3 >= accept { // an upper bound of the four: most bytes end here
			for j, s := range [4]int32{s0, s1, s2, s3} {
				if end := from[j] + i + 1; s >= accept && end > bound[j] {
					for _, p := range a.outputs[(s-accept)/nclass] {
						parts[j] = append(parts[j], hit{pattern: p, end: end})
					}
				}
			}
		}
	}
	for j, s := range [4]int32{s0, s1, s2, s3} {
		parts[j], _ = a.scanFrom(text, from[j]+steps, bound[j+1], bound[j], s, parts[j])
	}
	hits = parts[0]
	for _, p := range parts[1:] {
		hits = append(hits, p...)
	}
	return hits
}

// scanFrom scans text[from:to] from state s (already multiplied by nclass), appends the hits
// ending after minEnd, and returns the state reached.
func (a *automaton) scanFrom(text []byte, from, to, minEnd int, s int32, hits []hit) ([]hit, int32) {
	next, class, accept, nclass := a.next, &a.class, a.accept, int32(a.nclass)
	for i := from; i < to; i++ {
		s = next[s+int32(class[text[i]])]
		if s >= accept && i+1 > minEnd {
			for _, p := range a.outputs[(s-accept)/nclass] {
				hits = append(hits, hit{pattern: p, end: i + 1})
			}
		}
	}
	return hits, s
}

// any reports whether some pattern occurs in text.
func (a *automaton) any(text []byte) bool {
	next, class, accept := a.next, &a.class, a.accept
	s := int32(0)
	for _, b := range text {
		if s = next[s+int32(class[b])]; s >= accept {
			return true
		}
	}
	return false
}

func foldByte(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}
