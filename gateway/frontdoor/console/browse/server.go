package browse

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/toolgate/toolgate/evidence"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Access signs people in and decides what they may read. Package console
// implements it with the gateway's API keys and Cedar's
// Action::"ReadEvidence"; without it (a bucket served read-only) there is
// no sign-in and everything in the bucket is shown: whoever can reach the
// console could read the bucket anyway.
type Access interface {
	// SignIn exchanges an API key for the person it names.
	SignIn(ctx context.Context, key string) (Person, error)
	// MayRead reports whether p may read the evidence of request s.
	MayRead(ctx context.Context, p Person, s *Summary) bool
}

// HeldCall is one approval as the inbox shows it.
type HeldCall struct {
	ApprovalID, RequestID, Tool, Requester, RuleID, Reason, Approvers, State string
	RequestedAt, ExpiresAt                                                   time.Time
}

// Approvals lists and decides the calls held for a person's approval,
// through the gateway's own approval path (single-use, signed decisions).
type Approvals interface {
	// Held lists the pending approvals p may decide.
	Held(ctx context.Context, p Person) ([]HeldCall, error)
	// Decide approves or denies approval id as p, with a reason, and
	// returns the approval's state after it.
	Decide(ctx context.Context, p Person, id, decision, reason string) (string, error)
}

// RuleTexts returns the Cedar text of a rule (policy.Engine and
// policy.Live implement it).
type RuleTexts interface {
	RuleText(policyRef, ruleID string) (string, bool)
}

// Options configure a Server.
type Options struct {
	Store evidence.Reader
	Index *Index
	// Access, when set, requires sign-in and decides reads.
	Access Access
	// External, when set beside Access, offers sign-in with an identity
	// provider as well as with a key.
	External ExternalSignIn
	// Approvals, when set, serves the approvals inbox.
	Approvals Approvals
	// Rules, when set, shows the deciding rule's text.
	Rules RuleTexts
	// Verify is what verification trusts (keys, witnesses); proofs are
	// checked with the same keys.
	Verify evidence.VerifyOptions
	// SessionTTL is how long a sign-in lasts (default 8h).
	SessionTTL time.Duration
	// MaxSessions bounds the sessions held at once (default 10,000).
	MaxSessions int
	Logger      *slog.Logger
	Now         func() time.Time
}

// Server serves the console's pages.
type Server struct {
	opts     Options
	sessions *sessions
	pages    map[string]*template.Template
	log      *slog.Logger
	verify   *verifyJob
	mu       sync.Mutex // guards verify
	throttle *signInThrottle
}

// NewServer returns a console over opts.Store and opts.Index.
func NewServer(opts Options) (*Server, error) {
	if opts.Store == nil || opts.Index == nil {
		return nil, errors.New("console: a store and an index are required")
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = 8 * time.Hour
	}
	if opts.MaxSessions <= 0 {
		opts.MaxSessions = 10000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	return &Server{opts: opts, sessions: newSessions(opts.SessionTTL, opts.MaxSessions, opts.Now), pages: pages, log: opts.Logger,
		throttle: newSignInThrottle(opts.Now)}, nil
}

// pageNames are the templates, each rendered inside layout.html.
var pageNames = []string{"signin", "signedin", "requests", "request", "run", "approvals", "verify", "error"}

func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}

// Handler returns the console's routes behind its security headers.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /signin", s.signInPage)
	mux.HandleFunc("POST /signin", s.signIn)
	mux.HandleFunc("GET "+ExternalStartPath, s.externalBegin)
	mux.HandleFunc("GET "+ExternalCallbackPath, s.externalCallback)
	mux.HandleFunc("POST /signout", s.withSession(s.signOut))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/requests", http.StatusSeeOther) })
	mux.HandleFunc("GET /requests", s.withSession(s.requestsPage))
	mux.HandleFunc("GET /requests/{id}", s.withSession(s.requestPage))
	mux.HandleFunc("GET /requests/{id}/proof", s.withSession(s.proofDownload))
	mux.HandleFunc("GET /runs/{id}", s.withSession(s.runPage))
	mux.HandleFunc("GET /verify", s.withSession(s.verifyPage))
	mux.HandleFunc("POST /verify", s.withSession(s.verifyStart))
	mux.HandleFunc("GET /verify/report", s.withSession(s.verifyReport))
	mux.HandleFunc("GET /approvals", s.withSession(s.approvalsPage))
	mux.HandleFunc("POST /approvals/{id}", s.withSession(s.approvalDecide))
	return secure(mux)
}

// csp allows the console's own script and style files and nothing else:
// no inline script or style, no plugins, no framing, forms only to itself.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// secure sets the headers every response carries.
func secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		// same-origin, not no-referrer: with no-referrer a browser sends
		// "Origin: null" on the console's own forms, which sameOrigin refuses.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
			http.Error(w, "cross-site request refused", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin refuses a state-changing request a browser marks as coming
// from another site, beside the CSRF token each form carries.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// handlerWithSession is a page handler given the request's session.
type handlerWithSession func(w http.ResponseWriter, r *http.Request, ss *session, tok string)

// withSession runs h with the request's session: with Access, a request
// without one is sent to sign in; without Access (read-only), a session
// is started for the anonymous auditor so that its forms carry a CSRF
// token too. A POST must carry the session's CSRF token.
func (s *Server) withSession(h handlerWithSession) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, ss, ok := s.sessions.get(r)
		if !ok && s.opts.Access != nil {
			if r.Method != http.MethodGet {
				http.Error(w, "sign in first", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/signin", http.StatusSeeOther)
			return
		}
		if !ok {
			var err error
			if tok, ss, err = s.sessions.create(Person{Name: "auditor"}); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			http.SetCookie(w, sessionCookie(tok, s.opts.SessionTTL))
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if err := r.ParseForm(); err != nil || !ss.validCSRF(r.PostForm.Get("csrf")) {
				http.Error(w, "missing or wrong CSRF token", http.StatusForbidden)
				return
			}
		}
		h(w, r, ss, tok)
	}
}

// maxForm bounds a form's body.
const maxForm = 16 << 10

// render writes page name with data; a template failure is logged and
// answered 500 without the half-rendered page.
func (s *Server) render(w http.ResponseWriter, status int, name string, ss *session, data any) {
	view := struct {
		Page   string
		Person *Person
		CSRF   string
		Inbox  bool
		SignIn bool
		// External is the identity provider's sign-in link text, if any.
		External string
		Data     any
	}{Page: name, Data: data, Inbox: s.opts.Approvals != nil, SignIn: s.opts.Access != nil}
	if s.opts.External != nil && s.opts.Access != nil {
		view.External = s.opts.External.Label()
	}
	if ss != nil {
		view.Person, view.CSRF = &ss.person, ss.csrf
	}
	var buf writeBuffer
	if err := s.pages[name].Execute(&buf, view); err != nil {
		s.log.Error("console: render failed", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.b)
}

type writeBuffer struct{ b []byte }

func (w *writeBuffer) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }

// fail renders the error page.
func (s *Server) fail(w http.ResponseWriter, status int, ss *session, msg string) {
	s.render(w, status, "error", ss, msg)
}
