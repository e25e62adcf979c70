package approval

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/toolgate/toolgate/internal/syncbuf"
	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

var webhookTestSecret = []byte("whsec-0123456789abcdef")

// webhookTestRedactor is built once: compiling the rules takes most of a
// second under the race detector.
var webhookTestRedactor = sync.OnceValues(func() (*redact.Redactor, error) {
	return redact.New(redact.Config{KnownSecrets: []string{"configured-secret-value-42", string(webhookTestSecret)}})
})

// delivery is one request a test receiver got.
type delivery struct {
	header http.Header
	body   []byte
}

// receiver is a loopback webhook endpoint that answers with statuses in
// turn (the last one repeats) and sends every request it gets on got.
type receiver struct {
	*httptest.Server
	got chan delivery
	mu  sync.Mutex
	n   int
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	t.Helper()
	r := &receiver{got: make(chan delivery, 100)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.got <- delivery{header: req.Header.Clone(), body: body}
		r.mu.Lock()
		status := statuses[min(r.n, len(statuses)-1)]
		r.n++
		r.mu.Unlock()
		if status == http.StatusFound {
			http.Redirect(w, req, "/elsewhere", status)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.Close)
	return r
}

// deliveries returns what the receiver has got so far.
func (r *receiver) deliveries() []delivery {
	var out []delivery
	for {
		select {
		case d := <-r.got:
			out = append(out, d)
		default:
			return out
		}
	}
}

// verifyWebhook is what a receiver does: the signature must be the HMAC of
// the timestamp, a dot and the body, and the timestamp recent.
func verifyWebhook(secret []byte, h http.Header, body []byte, now time.Time) error {
	ts := h.Get(HeaderWebhookTimestamp)
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp %q: %w", ts, err)
	}
	if age := now.Sub(time.Unix(sec, 0)); age > 5*time.Minute || age < -5*time.Minute {
		return fmt.Errorf("timestamp %s is %v old", ts, age)
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts + "." + string(body)))
	want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
	if !hmac.Equal([]byte(want), []byte(h.Get(HeaderWebhookSignature))) {
		return errors.New("signature does not match")
	}
	return nil
}

// newTestNotifier returns a notifier for url with millisecond backoff,
// closed when the test ends, and its log.
func newTestNotifier(t *testing.T, url string, tune func(*WebhookOptions)) (*WebhookNotifier, *syncbuf.Buffer) {
	t.Helper()
	r, err := webhookTestRedactor()
	if err != nil {
		t.Fatal(err)
	}
	log := &syncbuf.Buffer{}
	opts := WebhookOptions{
		URL: url, Secret: webhookTestSecret, Redactor: r, Gateway: "gw-test",
		Logger:  slog.New(slog.NewTextHandler(log, nil)),
		Backoff: func(int) time.Duration { return time.Millisecond },
	}
	if tune != nil {
		tune(&opts)
	}
	n, err := NewWebhookNotifier(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n, log
}

func testApproval(t *testing.T, id string, args map[string]any) *toolgatev1.Approval {
	t.Helper()
	s, err := structpb.NewStruct(args)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	return &toolgatev1.Approval{
		ApprovalId: id, RequestId: "req-" + id, ToolId: "workspace.shell", Requester: "alice",
		RuleId: "shell_needs_ops", Reason: "runs arbitrary commands", Approvers: "ops", State: "pending",
		Args: s, RequestedAt: timestamppb.New(now), ExpiresAt: timestamppb.New(now.Add(time.Hour)),
		RequestHash: "sha256:" + strings.Repeat("ab", 32), PolicySetDigest: "sha256:" + strings.Repeat("cd", 32),
		PolicyRef: "policy.default",
	}
}

func pendingEvent(t *testing.T, id string, args map[string]any) Event {
	return Event{Type: EventPending, Approval: testApproval(t, id, args)}
}

func TestWebhookRetriesServerErrorsUnderOneDeliveryID(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusNoContent)
	n, _ := newTestNotifier(t, rcv.URL, nil)
	n.Notify(pendingEvent(t, "apr_one", map[string]any{"cmd": "ls"}))
	n.Close()
	got := rcv.deliveries()
	if len(got) != 3 {
		t.Fatalf("the receiver got %d deliveries, want 3 (503, 503, 204)", len(got))
	}
	for i, d := range got {
		if err := verifyWebhook(webhookTestSecret, d.header, d.body, time.Now()); err != nil {
			t.Errorf("delivery %d: %v", i, err)
		}
		if id := d.header.Get(HeaderWebhookDelivery); id != "apr_one/approval.pending" {
			t.Errorf("delivery %d: %s = %q, want apr_one/approval.pending", i, HeaderWebhookDelivery, id)
		}
		if ct := d.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("delivery %d: Content-Type %q", i, ct)
		}
		if !bytes.Equal(d.body, got[0].body) {
			t.Errorf("delivery %d: the body changed between retries", i)
		}
	}
	var body map[string]any
	if err := json.Unmarshal(got[0].body, &body); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"type": "approval.pending", "approval_id": "apr_one", "tool_id": "workspace.shell",
		"requester": "alice", "approvers": "ops", "rule_id": "shell_needs_ops", "gateway": "gw-test",
		"request_id": "req-apr_one", "policy_ref": "policy.default",
	} {
		if body[k] != want {
			t.Errorf("body %s = %v, want %v", k, body[k], want)
		}
	}
	for _, k := range []string{"sent_at", "expires_at", "request_hash", "policy_set_digest", "args"} {
		if body[k] == nil {
			t.Errorf("body has no %s: %s", k, got[0].body)
		}
	}
}

func TestWebhookRetriesOnlyWhatARetryCanFix(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		statuses []int
		retries  int
		want     int
	}{
		{"a 400 is delivered exactly once", []int{http.StatusBadRequest}, 5, 1},
		{"a 401 is delivered exactly once", []int{http.StatusUnauthorized}, 5, 1},
		{"a 404 is delivered exactly once", []int{http.StatusNotFound}, 5, 1},
		{"a redirect is not followed nor retried", []int{http.StatusFound}, 5, 1},
		{"a 429 is retried", []int{http.StatusTooManyRequests, http.StatusOK}, 5, 2},
		{"a 500 is retried until the retries run out", []int{http.StatusInternalServerError}, 3, 4},
		{"negative retries mean one attempt", []int{http.StatusBadGateway}, -1, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rcv := newReceiver(t, tc.statuses...)
			n, log := newTestNotifier(t, rcv.URL, func(o *WebhookOptions) { o.Retries = tc.retries })
			n.Notify(pendingEvent(t, "apr_x", nil))
			n.Close()
			got := rcv.deliveries()
			if len(got) != tc.want {
				t.Fatalf("the receiver got %d deliveries, want %d", len(got), tc.want)
			}
			for _, d := range got {
				if d.header.Get(HeaderWebhookDelivery) != "apr_x/approval.pending" {
					t.Errorf("delivery id %q", d.header.Get(HeaderWebhookDelivery))
				}
			}
			if last := tc.statuses[len(tc.statuses)-1]; last >= 300 && !strings.Contains(log.String(), "delivery failed") {
				t.Errorf("the failure was not logged:\n%s", log)
			}
		})
	}
}

func TestWebhookRetriesADroppedConnection(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		first := calls == 1
		mu.Unlock()
		if first {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	n, log := newTestNotifier(t, srv.URL+"/hook-token-in-path", nil)
	n.Notify(pendingEvent(t, "apr_conn", nil))
	n.Close()
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 {
		t.Fatalf("the receiver saw %d requests, want 2 (a dropped connection, then a retry)", calls)
	}
	if strings.Contains(log.String(), "hook-token-in-path") {
		t.Errorf("the log names the webhook URL, which may be a credential:\n%s", log)
	}
}

func TestWebhookBodyIsRedacted(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, http.StatusNoContent)
	n, _ := newTestNotifier(t, rcv.URL, nil)
	pat := "ghp_R8xk2Lq9ZtV4mW7nB1cJ5hD3fG6sA0pE2yU8"
	n.Notify(pendingEvent(t, "apr_sec", map[string]any{
		"cmd":     "curl -H 'Authorization: token " + pat + "' https://api.github.com",
		"note":    "the value configured-secret-value-42 leaked into the args",
		"hmac":    string(webhookTestSecret),
		"api_key": "plain-looking-value-xyz",
	}))
	n.Close()
	got := rcv.deliveries()
	if len(got) != 1 {
		t.Fatalf("%d deliveries, want 1", len(got))
	}
	for _, secret := range []string{pat, "configured-secret-value-42", string(webhookTestSecret), "plain-looking-value-xyz"} {
		if bytes.Contains(got[0].body, []byte(secret)) {
			t.Errorf("the body carries the secret %q:\n%s", secret, got[0].body)
		}
	}
	if !bytes.Contains(got[0].body, []byte("[REDACTED:")) {
		t.Errorf("the body shows no redaction:\n%s", got[0].body)
	}
	if err := verifyWebhook(webhookTestSecret, got[0].header, got[0].body, time.Now()); err != nil {
		t.Errorf("the redacted body is not what was signed: %v", err)
	}
}

func TestWebhookSignatureCoversTheTimestamp(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t, http.StatusNoContent)
	n, _ := newTestNotifier(t, rcv.URL, nil)
	n.Notify(pendingEvent(t, "apr_sig", nil))
	n.Close()
	got := rcv.deliveries()
	if len(got) != 1 {
		t.Fatalf("%d deliveries, want 1", len(got))
	}
	d := got[0]
	if err := verifyWebhook(webhookTestSecret, d.header, d.body, time.Now()); err != nil {
		t.Fatalf("the genuine delivery fails verification: %v", err)
	}
	sent, _ := strconv.ParseInt(d.header.Get(HeaderWebhookTimestamp), 10, 64)
	replayed := d.header.Clone()
	replayed.Set(HeaderWebhookTimestamp, strconv.FormatInt(sent+600, 10))
	if err := verifyWebhook(webhookTestSecret, replayed, d.body, time.Unix(sent+600, 0)); err == nil {
		t.Error("the body replayed ten minutes later under a fresh timestamp passes verification")
	}
	if err := verifyWebhook(webhookTestSecret, d.header, d.body, time.Unix(sent+600, 0)); err == nil {
		t.Error("the body replayed ten minutes later with its own timestamp passes verification")
	}
	tampered := bytes.Replace(d.body, []byte("alice"), []byte("mallory"), 1)
	if err := verifyWebhook(webhookTestSecret, d.header, tampered, time.Now()); err == nil {
		t.Error("a changed body passes verification")
	}
	if err := verifyWebhook([]byte("another secret"), d.header, d.body, time.Now()); err == nil {
		t.Error("the delivery verifies under another secret")
	}
}

// blockingReceiver holds every request until release is called (or the
// test ends).
func blockingReceiver(t *testing.T) (url string, got chan struct{}, release func()) {
	t.Helper()
	got, unblock := make(chan struct{}, 100), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- struct{}{}
		select {
		case <-unblock:
		case <-r.Context().Done():
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	var once sync.Once
	release = func() { once.Do(func() { close(unblock) }) }
	t.Cleanup(release)
	return srv.URL, got, release
}

func TestWebhookSlowReceiverDoesNotDelayNotify(t *testing.T) {
	t.Parallel()
	url, got, _ := blockingReceiver(t)
	n, _ := newTestNotifier(t, url, func(o *WebhookOptions) { o.Timeout = time.Minute; o.DrainTimeout = 50 * time.Millisecond })
	n.Notify(pendingEvent(t, "apr_0", nil))
	<-got // the worker is now stuck on the slow receiver
	start := time.Now()
	for i := 1; i <= 200; i++ {
		n.Notify(pendingEvent(t, fmt.Sprintf("apr_%d", i), nil))
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("200 Notify calls behind a stuck receiver took %v", took)
	}
}

func TestWebhookFullQueueDropsAndLogs(t *testing.T) {
	t.Parallel()
	url, got, release := blockingReceiver(t)
	n, log := newTestNotifier(t, url, func(o *WebhookOptions) { o.QueueSize = 2; o.Timeout = time.Minute })
	n.Notify(pendingEvent(t, "apr_first", nil))
	<-got // in flight, the queue is empty again
	const extra = 10
	done := make(chan struct{})
	go func() {
		for i := range extra {
			n.Notify(pendingEvent(t, fmt.Sprintf("apr_q%d", i), nil))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Notify blocked on a full queue")
	}
	if dropped := strings.Count(log.String(), "queue of 2 is full"); dropped != extra-2 {
		t.Errorf("%d drops logged, want %d:\n%s", dropped, extra-2, log)
	}
	release()
	n.Close()
	if delivered := 1 + len(got); delivered != 3 {
		t.Errorf("%d deliveries, want 3 (one in flight, two queued)", delivered)
	}
}

func TestWebhookCloseDrainsWithADeadline(t *testing.T) {
	t.Parallel()
	t.Run("queued events are delivered before Close returns", func(t *testing.T) {
		t.Parallel()
		rcv := newReceiver(t, http.StatusNoContent)
		n, _ := newTestNotifier(t, rcv.URL, nil)
		for i := range 5 {
			n.Notify(pendingEvent(t, fmt.Sprintf("apr_%d", i), nil))
		}
		n.Close()
		if got := len(rcv.deliveries()); got != 5 {
			t.Fatalf("%d of 5 queued events delivered by Close", got)
		}
	})
	t.Run("a stuck receiver holds Close no longer than the deadline", func(t *testing.T) {
		url, got, _ := blockingReceiver(t)
		n, log := newTestNotifier(t, url, func(o *WebhookOptions) { o.Timeout = time.Minute; o.DrainTimeout = 100 * time.Millisecond })
		n.Notify(pendingEvent(t, "apr_stuck", nil))
		n.Notify(pendingEvent(t, "apr_queued", nil))
		<-got
		start := time.Now()
		n.Close()
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("Close took %v with a 100ms drain deadline", took)
		}
		if !strings.Contains(log.String(), "approval_id=apr_queued") {
			t.Errorf("the event left in the queue was not logged as dropped:\n%s", log)
		}
		n.Notify(pendingEvent(t, "apr_late", nil))
		if !strings.Contains(log.String(), "the notifier is closed") {
			t.Errorf("Notify after Close was not logged as dropped:\n%s", log)
		}
	})
}

func TestWebhookRetryAfter(t *testing.T) {
	t.Parallel()
	tests := []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{"86400", maxWebhookBackoff},
		{"-5", 0},
		{"soon", 0},
		{time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), 0},
	}
	for _, tc := range tests {
		if got := retryAfter(tc.header); got != tc.want {
			t.Errorf("Retry-After %q: wait %v, want %v", tc.header, got, tc.want)
		}
	}
	for retry, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, time.Minute, time.Minute} {
		if got := exponentialBackoff(retry); got != want {
			t.Errorf("backoff before retry %d = %v, want %v", retry, got, want)
		}
	}
}

func TestNewWebhookNotifierRefusesMissingPieces(t *testing.T) {
	t.Parallel()
	r, err := webhookTestRedactor()
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]WebhookOptions{
		"no url":      {Secret: webhookTestSecret, Redactor: r},
		"no secret":   {URL: "https://hooks.example/x", Redactor: r},
		"no redactor": {URL: "https://hooks.example/x", Secret: webhookTestSecret},
	} {
		if n, err := NewWebhookNotifier(opts); err == nil {
			n.Close()
			t.Errorf("%s: a notifier was made", name)
		}
	}
}
