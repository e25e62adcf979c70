package browse

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

// pageSize is how many requests a page of the listing shows.
const pageSize = 50

// pageBudget is how long a listing scans before it shows what it found
// and offers to go on.
const pageBudget = 150 * time.Millisecond

func (s *Server) signInPage(w http.ResponseWriter, r *http.Request) {
	if s.opts.Access == nil {
		http.Redirect(w, r, "/requests", http.StatusSeeOther)
		return
	}
	s.render(w, http.StatusOK, "signin", nil, "")
}

// signIn exchanges an API key, once, for a session cookie. The key is not
// kept: the session is the person the key named.
func (s *Server) signIn(w http.ResponseWriter, r *http.Request) {
	if s.opts.Access == nil {
		http.Redirect(w, r, "/requests", http.StatusSeeOther)
		return
	}
	addr := clientAddr(r)
	if !s.throttle.allowed(addr) {
		s.render(w, http.StatusTooManyRequests, "signin", nil, "Too many failed sign-ins from your address: wait a minute.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		s.render(w, http.StatusBadRequest, "signin", nil, "The form could not be read.")
		return
	}
	p, err := s.opts.Access.SignIn(r.Context(), r.PostForm.Get("key"))
	if err != nil {
		s.throttle.failed(addr)
		s.log.Info("console: sign-in refused", "err", err)
		s.render(w, http.StatusUnauthorized, "signin", nil, "That key is not valid.")
		return
	}
	if !s.startSession(w, p) {
		return
	}
	http.Redirect(w, r, "/requests", http.StatusSeeOther)
}

// startSession starts a session for the person p signed in as and sets
// its cookie, which lasts no longer than the session nor what p signed in
// with. It reports false after answering w with the error.
func (s *Server) startSession(w http.ResponseWriter, p Person) bool {
	p.Approver = s.opts.Approvals != nil
	tok, _, err := s.sessions.create(p)
	if err != nil {
		s.render(w, http.StatusServiceUnavailable, "signin", nil, err.Error())
		return false
	}
	ttl := s.opts.SessionTTL
	if !p.Expires.IsZero() {
		ttl = min(ttl, p.Expires.Sub(s.opts.Now()))
	}
	http.SetCookie(w, sessionCookie(tok, max(ttl, time.Second)))
	return true
}

func (s *Server) signOut(w http.ResponseWriter, r *http.Request, _ *session, tok string) {
	s.sessions.end(tok)
	c := sessionCookie("", 0)
	c.MaxAge = -1
	http.SetCookie(w, c)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// visible returns the reader's view of the index: everything without
// Access, else what Cedar lets the person read, decided once per request
// per listing.
func (s *Server) visible(ctx context.Context, ss *session) func(*Summary) bool {
	if s.opts.Access == nil {
		return func(*Summary) bool { return true }
	}
	return func(sum *Summary) bool { return s.opts.Access.MayRead(ctx, ss.person, sum) }
}

// requestsView is the requests page's data.
type requestsView struct {
	Filter  Filter
	From    string
	To      string
	Page    Page
	NextURL string
	Indexed int
	States  []string
}

func (s *Server) requestsPage(w http.ResponseWriter, r *http.Request, ss *session, _ string) {
	q := r.URL.Query()
	f := Filter{
		Caller: q.Get("caller"), Tool: q.Get("tool"), Decision: q.Get("decision"), Rule: q.Get("rule"),
		State: q.Get("state"), RunID: q.Get("run"), Query: q.Get("q"), After: q.Get("after"), Limit: pageSize,
	}
	v := requestsView{Filter: f, From: q.Get("from"), To: q.Get("to"), Indexed: s.opts.Index.Len(),
		States: []string{StateClaimed, StateDecided, StatePendingApproval, StateNotDispatched, StateDispatched,
			evidence.OutcomeCompleted, evidence.OutcomeFailed, evidence.OutcomeInterrupted}}
	var err error
	if f.From, err = parseFormTime(v.From); err == nil {
		f.To, err = parseFormTime(v.To)
	}
	if err != nil {
		s.fail(w, http.StatusBadRequest, ss, err.Error())
		return
	}
	f.Deadline = time.Now().Add(pageBudget)
	v.Page = s.opts.Index.Query(f, s.visible(r.Context(), ss))
	if v.Page.Next != "" {
		next := r.URL.Query()
		next.Set("after", v.Page.Next)
		v.NextURL = "/requests?" + next.Encode()
	}
	s.render(w, http.StatusOK, "requests", ss, v)
}

// parseFormTime reads a time filter: empty, RFC 3339, or the
// datetime-local form a browser sends (taken as UTC).
func parseFormTime(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("time %q: want RFC 3339 or YYYY-MM-DDTHH:MM (UTC)", v)
}

// readable returns the summary of request id when the person may read
// it; a request they may not read is answered as one that does not exist.
func (s *Server) readable(ctx context.Context, ss *session, id string) (Summary, bool) {
	if evidence.ValidKey(evidence.Key(id, evidence.ArtifactRequest)) != nil {
		return Summary{}, false
	}
	// A request the index has not seen yet waits for its next refresh:
	// refreshing on a miss would let anyone make the console list the
	// whole store with every made-up id.
	sum, ok := s.opts.Index.Get(id)
	if !ok {
		return Summary{}, false
	}
	return sum, s.visible(ctx, ss)(&sum)
}

// artifactView is one artifact as the request page shows it.
type artifactView struct {
	Key      string
	Size     int
	Segments []segment
	JSON     bool
}

// requestView is the request page's data.
type requestView struct {
	Summary   Summary
	Report    evidence.VerifyReport
	Verdict   string
	Verified  bool
	Tampered  bool
	Log       proofView
	Cosigned  proofView
	Decision  *evidence.DecisionRecord
	RuleText  string
	Manifest  *evidence.Manifest
	Artifacts []artifactView
	Markers   int
}

// proofView says whether a log inclusion proof verified.
type proofView struct {
	State  string // "verified", "failed", "unavailable" or "unchecked"
	Detail string
}

func (s *Server) requestPage(w http.ResponseWriter, r *http.Request, ss *session, _ string) {
	ctx, id := r.Context(), r.PathValue("id")
	sum, ok := s.readable(ctx, ss, id)
	if !ok {
		s.fail(w, http.StatusNotFound, ss, "No such request, or you may not read it.")
		return
	}
	v := requestView{Summary: sum}
	rep, err := evidence.Verify(ctx, s.opts.Store, id, s.opts.Verify)
	if err != nil {
		s.fail(w, http.StatusBadGateway, ss, "The store could not be read: "+err.Error())
		return
	}
	v.Report, v.Verdict, v.Tampered = rep, rep.Verdict(), rep.Tampered()
	v.Verified = v.Verdict == evidence.StatusOK
	v.Log = s.checkProof(ctx, id, false)
	v.Cosigned = s.checkProof(ctx, id, true)
	if err := s.loadArtifacts(ctx, id, &v); err != nil {
		s.fail(w, http.StatusBadGateway, ss, "The store could not be read: "+err.Error())
		return
	}
	if v.Decision != nil && s.opts.Rules != nil {
		v.RuleText, _ = s.opts.Rules.RuleText(v.Decision.PolicyRef, v.Decision.RuleID)
	}
	s.render(w, http.StatusOK, "request", ss, v)
}

// checkProof proves the request's manifest is in its log (or in a
// witness-cosigned checkpoint) and checks that proof as an offline
// verifier would, with the same keys as verification.
func (s *Server) checkProof(ctx context.Context, id string, cosigned bool) proofView {
	data, err := evidence.Prove(ctx, s.opts.Store, id, evidence.ProveOptions{Cosigned: cosigned})
	if err != nil {
		if errors.Is(err, evidence.ErrLoggedManifestGone) {
			return proofView{State: "failed", Detail: err.Error()}
		}
		return proofView{State: "unavailable", Detail: err.Error()}
	}
	if len(s.opts.Verify.TrustedKeys) == 0 {
		return proofView{State: "unchecked", Detail: "no trusted key was given to check the log's signature with"}
	}
	opts := evidence.ProofOptions{LogKeys: s.opts.Verify.TrustedKeys}
	if cosigned {
		opts.Witnesses, opts.WitnessThreshold = s.opts.Verify.Witnesses, max(s.opts.Verify.WitnessThreshold, 1)
		if len(opts.Witnesses) == 0 {
			return proofView{State: "unchecked", Detail: "no witness key was given to check the cosignatures with"}
		}
	}
	rep, err := evidence.VerifyProof(data, opts)
	if err != nil {
		return proofView{State: "failed", Detail: err.Error()}
	}
	detail := fmt.Sprintf("entry %d of log %s, checkpoint of %d entries", rep.Index, rep.Origin, rep.CheckpointSize)
	if cosigned {
		detail += "; cosigned by " + strings.Join(rep.Witnesses, ", ")
	}
	return proofView{State: "verified", Detail: detail}
}

// loadArtifacts reads every artifact of the request into v, formatted.
func (s *Server) loadArtifacts(ctx context.Context, id string, v *requestView) error {
	keys, err := s.opts.Store.List(ctx, evidence.RequestPrefix(id))
	if err != nil {
		return err
	}
	if len(keys) > maxArtifactsShown {
		keys = keys[:maxArtifactsShown]
	}
	decKey := lastDecisionKey(id, keys)
	for _, key := range keys {
		data, err := s.opts.Store.Get(ctx, key)
		if errors.Is(err, evidence.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		a := artifactView{Key: key, Size: len(data)}
		text := string(data)
		var pretty bytes.Buffer
		if json.Indent(&pretty, data, "", "  ") == nil {
			text, a.JSON = string(bytes.TrimSpace(pretty.Bytes())), true
		}
		a.Segments = markers(text)
		for _, seg := range a.Segments {
			if seg.Marker {
				v.Markers++
			}
		}
		v.Artifacts = append(v.Artifacts, a)
		switch key {
		case decKey:
			var d evidence.DecisionRecord
			if json.Unmarshal(data, &d) == nil {
				v.Decision = &d
			}
		case evidence.Key(id, evidence.ArtifactManifest):
			if m, err := evidence.ParseManifest(data); err == nil {
				v.Manifest = &m
			}
		}
	}
	return nil
}

// maxArtifactsShown bounds the artifacts one page reads: a request folder
// stuffed with keys must not make one page read the bucket.
const maxArtifactsShown = 200

func (s *Server) proofDownload(w http.ResponseWriter, r *http.Request, ss *session, _ string) {
	id := r.PathValue("id")
	if _, ok := s.readable(r.Context(), ss, id); !ok {
		s.fail(w, http.StatusNotFound, ss, "No such request, or you may not read it.")
		return
	}
	data, err := evidence.Prove(r.Context(), s.opts.Store, id, evidence.ProveOptions{})
	if err != nil {
		s.fail(w, http.StatusNotFound, ss, "No proof: "+err.Error())
		return
	}
	download(w, id+".tlog-proof", data)
}

// download sends data as a file to save, never to render.
func download(w http.ResponseWriter, name string, data []byte) {
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`"`)
	w.Header().Set("Content-Security-Policy", "sandbox; default-src 'none'")
	_, _ = w.Write(data)
}

// runCall is one call of a run as the run page shows it.
type runCall struct {
	Summary
	Depth   int
	Offset  string
	History *evidence.DecisionHistory
	// Took is how long the tool ran, from tool_result.json ("" when it
	// did not run).
	Took string
}

func (s *Server) runPage(w http.ResponseWriter, r *http.Request, ss *session, _ string) {
	ctx, id := r.Context(), r.PathValue("id")
	visible := s.visible(ctx, ss)
	var calls []Summary
	for _, c := range s.opts.Index.RunCalls(id) {
		if visible(&c) {
			calls = append(calls, c)
		}
	}
	if len(calls) == 0 {
		s.fail(w, http.StatusNotFound, ss, "No such run, or you may not read any of its calls.")
		return
	}
	tree := runTree(calls)
	start := calls[0].Received
	for i := range tree {
		tree[i].Offset = "+" + tree[i].Received.Sub(start).Round(time.Millisecond).String()
		if i < maxHistoryReads {
			tree[i].History, tree[i].Took = s.history(ctx, tree[i].ID)
		}
	}
	s.render(w, http.StatusOK, "run", ss, struct {
		RunID string
		Calls []runCall
	}{id, tree})
}

// maxHistoryReads bounds the decisions one run page reads.
const maxHistoryReads = 500

// history reads the session history facts the request's last decision
// saw, and how long its tool ran.
func (s *Server) history(ctx context.Context, id string) (*evidence.DecisionHistory, string) {
	keys, err := s.opts.Store.List(ctx, evidence.RequestPrefix(id))
	if err != nil {
		return nil, ""
	}
	var d evidence.DecisionRecord
	var run evidence.RunRecord
	if readJSON(ctx, s.opts.Store, keys, lastDecisionKey(id, keys), &d) != nil ||
		readJSON(ctx, s.opts.Store, keys, evidence.Key(id, evidence.ArtifactToolResult), &run) != nil {
		return nil, ""
	}
	took := ""
	if slices.Contains(keys, evidence.Key(id, evidence.ArtifactToolResult)) {
		took = (time.Duration(run.DurationMS) * time.Millisecond).String()
	}
	return d.History, took
}

// runTree orders a run's calls (oldest first) as a tree: each nested
// guest call under the call that made it, at one more depth.
func runTree(calls []Summary) []runCall {
	in := map[string]bool{}
	children := map[string][]Summary{}
	for _, c := range calls {
		in[c.ID] = true
	}
	var roots []Summary
	for _, c := range calls {
		if c.ParentID != "" && in[c.ParentID] && c.ParentID != c.ID {
			children[c.ParentID] = append(children[c.ParentID], c)
			continue
		}
		roots = append(roots, c)
	}
	var out []runCall
	seen := map[string]bool{}
	var walk func(c Summary, depth int)
	walk = func(c Summary, depth int) {
		if seen[c.ID] {
			return
		}
		seen[c.ID] = true
		out = append(out, runCall{Summary: c, Depth: depth})
		for _, k := range children[c.ID] {
			walk(k, min(depth+1, 8))
		}
	}
	for _, c := range roots {
		walk(c, 0)
	}
	for _, c := range calls { // parent cycles: shown flat, never lost
		if !seen[c.ID] {
			walk(c, 0)
		}
	}
	return out
}

// heldView is one held call in the inbox, with its canonical arguments.
type heldView struct {
	HeldCall
	Driver string
	Args   []folded
}

func (s *Server) approvalsPage(w http.ResponseWriter, r *http.Request, ss *session, _ string) {
	if s.opts.Approvals == nil {
		s.fail(w, http.StatusNotFound, ss, "This console has no approvals inbox: it serves a bucket without a gateway.")
		return
	}
	held, err := s.opts.Approvals.Held(r.Context(), ss.person)
	if err != nil {
		s.fail(w, http.StatusBadGateway, ss, "The approvals could not be listed: "+err.Error())
		return
	}
	views := make([]heldView, 0, len(held))
	for _, h := range held {
		views = append(views, s.heldView(r.Context(), h))
	}
	s.render(w, http.StatusOK, "approvals", ss, struct {
		Held []heldView
		Note string
	}{views, r.URL.Query().Get("done")})
}

// heldView reads the held call's canonical arguments from its claim, as
// the approval binds them (the canonical request hash covers them).
func (s *Server) heldView(ctx context.Context, h HeldCall) heldView {
	v := heldView{HeldCall: h}
	keys, err := s.opts.Store.List(ctx, evidence.RequestPrefix(h.RequestID))
	if err != nil {
		return v
	}
	var req evidence.RequestRecord
	var dec evidence.DecisionRecord
	if readJSON(ctx, s.opts.Store, keys, evidence.Key(h.RequestID, evidence.ArtifactRequest), &req) != nil ||
		readJSON(ctx, s.opts.Store, keys, lastDecisionKey(h.RequestID, keys), &dec) != nil {
		return v
	}
	v.Driver = dec.Driver
	v.Args = foldArgs(req.Args)
	return v
}

func (s *Server) approvalDecide(w http.ResponseWriter, r *http.Request, ss *session, _ string) {
	if s.opts.Approvals == nil {
		s.fail(w, http.StatusNotFound, ss, "This console has no approvals inbox.")
		return
	}
	id, decision, reason := r.PathValue("id"), r.PostForm.Get("decision"), r.PostForm.Get("reason")
	if decision != "approve" && decision != "deny" {
		s.fail(w, http.StatusBadRequest, ss, "The decision must be approve or deny.")
		return
	}
	state, err := s.opts.Approvals.Decide(r.Context(), ss.person, id, decision, reason)
	if err != nil {
		s.fail(w, http.StatusForbidden, ss, "The decision was not recorded: "+err.Error())
		return
	}
	http.Redirect(w, r, "/approvals?done="+urlQueryEscape(id+" "+state), http.StatusSeeOther)
}

func urlQueryEscape(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", " ", "+", "#", "%23", "?", "%3F").Replace(s)
}

// folded is one argument of a held call: its path and canonical JSON
// value, with a long value's head shown and the whole of it one click
// away, never cut silently.
type folded struct {
	Path  string
	Value string
	Head  string
	Long  bool
	Rest  int
}

// foldAt is the length past which a value is folded.
const foldAt = 160

// foldArgs lists the top-level arguments of a canonical args object.
func foldArgs(raw json.RawMessage) []folded {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return []folded{fold("(arguments)", string(raw))}
	}
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	slices.Sort(names)
	out := make([]folded, 0, len(names))
	for _, k := range names {
		out = append(out, fold(k, string(obj[k])))
	}
	return out
}

func fold(path, value string) folded {
	f := folded{Path: path, Value: value}
	if len(value) > foldAt {
		cut := foldAt
		for cut > 0 && !utf8Start(value[cut]) {
			cut--
		}
		f.Long, f.Head, f.Rest = true, value[:cut], len(value)-cut
	}
	return f
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// segment is a run of an artifact's text: plain, or a redaction marker.
type segment struct {
	Text   string
	Marker bool
}

// markerPrefix starts the redactor's markers: "[REDACTED:<rule>]".
const markerPrefix = "[REDACTED:"

// markers splits text into plain runs and redaction markers.
func markers(text string) []segment {
	var out []segment
	for text != "" {
		i := strings.Index(text, markerPrefix)
		if i < 0 {
			break
		}
		j := strings.IndexByte(text[i+len(markerPrefix):], ']')
		if j < 0 || j > 128 {
			out = append(out, segment{Text: text[:i+len(markerPrefix)]})
			text = text[i+len(markerPrefix):]
			continue
		}
		end := i + len(markerPrefix) + j + 1
		if i > 0 {
			out = append(out, segment{Text: text[:i]})
		}
		out = append(out, segment{Text: text[i:end], Marker: true})
		text = text[end:]
	}
	if text != "" {
		out = append(out, segment{Text: text})
	}
	return out
}

// itoa is strconv.Itoa for templates.
func itoa(n int) string { return strconv.Itoa(n) }
