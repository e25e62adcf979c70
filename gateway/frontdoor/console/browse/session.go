package browse

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"sync"
	"time"
)

// CookieName is the session cookie's name.
const CookieName = "toolgate_console"

// Person is who a session belongs to: the caller name Cedar sees as
// Caller::"<Name>", and what the console may offer them.
type Person struct {
	Name   string
	Groups []string
	// Approver is set when the console has an approvals inbox to show;
	// Cedar still decides each approval.
	Approver bool
	// Identity is what Access keeps of a token sign-in (package console
	// keeps the token's verified identity); nil for an API key.
	Identity any
	// Expires, when set, ends the session no later than this (a token's
	// expiry): a session never outlives the credential it came from.
	Expires time.Time
}

// session is one signed-in person: the cookie's token maps to it, and the
// CSRF token every form of theirs must carry.
type session struct {
	person  Person
	csrf    string
	expires time.Time
}

// sessions holds the signed-in sessions, server side: the cookie carries
// only a random token, so a session ends for good when it expires or its
// person signs out.
type sessions struct {
	mu    sync.Mutex
	byTok map[string]*session
	ttl   time.Duration
	max   int
	now   func() time.Time
}

// errTooManySessions refuses a sign-in while the session table is full of
// live sessions.
var errTooManySessions = errors.New("console: too many sessions; try again later")

func newSessions(ttl time.Duration, max int, now func() time.Time) *sessions {
	return &sessions{byTok: map[string]*session{}, ttl: ttl, max: max, now: now}
}

// create starts a session for p and returns its token.
func (s *sessions) create(p Person) (string, *session, error) {
	tok, csrf := randomToken(), randomToken()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.byTok) >= s.max {
		for t, ss := range s.byTok {
			if !now.Before(ss.expires) {
				delete(s.byTok, t)
			}
		}
		if len(s.byTok) >= s.max {
			return "", nil, errTooManySessions
		}
	}
	expires := now.Add(s.ttl)
	if !p.Expires.IsZero() && p.Expires.Before(expires) {
		expires = p.Expires
	}
	ss := &session{person: p, csrf: csrf, expires: expires}
	s.byTok[tok] = ss
	return tok, ss, nil
}

// get returns the live session of the request's cookie, if any.
func (s *sessions) get(r *http.Request) (string, *session, bool) {
	c, err := r.Cookie(CookieName)
	if err != nil || len(c.Value) != tokenLen {
		return "", nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.byTok[c.Value]
	if !ok {
		return "", nil, false
	}
	if !s.now().Before(ss.expires) {
		delete(s.byTok, c.Value)
		return "", nil, false
	}
	return c.Value, ss, true
}

func (s *sessions) end(tok string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.byTok, tok)
}

// tokenLen is the length of a token: 32 random bytes, base64url.
var tokenLen = base64.RawURLEncoding.EncodedLen(32)

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sessionCookie is the cookie of a session: HttpOnly (no script reads
// it), Secure, SameSite=Strict (no other site's page sends it), for the
// whole console, ending with the session.
func sessionCookie(tok string, ttl time.Duration) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: tok, Path: "/", MaxAge: int(ttl.Seconds()),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode}
}

// validCSRF reports whether a form's token is the session's.
func (ss *session) validCSRF(token string) bool {
	return len(token) == len(ss.csrf) && subtle.ConstantTimeCompare([]byte(token), []byte(ss.csrf)) == 1
}
