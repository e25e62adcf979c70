package approval

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	toolgatev1 "github.com/toolgate/toolgate/proto/toolgate/v1"
	"github.com/toolgate/toolgate/redact"
)

// Webhook defaults, used where WebhookOptions leaves a field zero.
const (
	defaultWebhookTimeout   = 5 * time.Second
	defaultWebhookRetries   = 5
	defaultWebhookQueue     = 1024
	defaultWebhookDrain     = 10 * time.Second
	maxWebhookBackoff       = 60 * time.Second
	maxWebhookResponseBytes = 64 << 10
)

// Headers of every webhook delivery.
const (
	// HeaderWebhookTimestamp carries the unix time, in seconds, at which
	// the delivery attempt was signed.
	HeaderWebhookTimestamp = "X-Toolgate-Timestamp"
	// HeaderWebhookSignature carries "sha256=" and the hex HMAC-SHA256,
	// under the webhook secret, of the timestamp, a dot and the body.
	HeaderWebhookSignature = "X-Toolgate-Signature"
	// HeaderWebhookDelivery carries "<approval_id>/<type>": the same on
	// every retry, so a receiver can drop the duplicates that at-least-once
	// delivery brings.
	HeaderWebhookDelivery = "X-Toolgate-Delivery"
)

// Notifier is told of approvals as they are asked for and decided, so that
// people can be shown them. Notify must not block: it is called on the
// call's path, after the evidence is stored.
type Notifier interface {
	Notify(ev Event)
}

// Event types, in Event.Type.
const (
	EventPending = "approval.pending"
	EventDecided = "approval.decided"
)

// Event is what a Notifier is told: the approval as ListApprovals would
// show it, and whether it was asked for or decided.
type Event struct {
	// Type is EventPending or EventDecided.
	Type string
	// Approval is the approval, its arguments redacted as its evidence
	// records them.
	Approval *toolgatev1.Approval
}

// WebhookOptions configure a WebhookNotifier.
type WebhookOptions struct {
	// URL receives the POSTs. Build has validated it (https, or http to a
	// loopback host).
	URL string
	// Secret keys the HMAC of every delivery; required.
	Secret []byte
	// Redactor passes every body before it leaves the gateway; required,
	// so that nothing the arguments carry escapes unredacted.
	Redactor *redact.Redactor
	// Logger reports failed and dropped deliveries; nil discards.
	Logger *slog.Logger
	// Gateway names this gateway instance in every body.
	Gateway string
	// UserAgent is every request's User-Agent; "" means "toolgate".
	UserAgent string
	// Timeout bounds one delivery attempt; 0 means 5s.
	Timeout time.Duration
	// Retries is how many times a failed delivery is tried again; 0 means
	// 5, a negative value means never.
	Retries int
	// Backoff is the wait before retry n (0 for the first retry); nil
	// means 1s, 2s, 4s … capped at 60s. A Retry-After header the
	// receiver sends lengthens the wait, up to 60s.
	Backoff func(retry int) time.Duration
	// QueueSize bounds the events waiting to be sent; 0 means 1024. When
	// the queue is full an event is dropped and logged.
	QueueSize int
	// DrainTimeout bounds how long Close goes on delivering what is
	// queued; 0 means 10s.
	DrainTimeout time.Duration
	// Client sends the requests; nil means a client that follows no
	// redirects (a redirect could carry the signed body elsewhere).
	Client *http.Client
}

// WebhookNotifier posts approval events to an HTTP endpoint, signed with
// HMAC-SHA256, from one background worker: Notify only queues. Delivery is
// best effort and at least once; the evidence and ListApprovals are the
// truth, not the webhook.
type WebhookNotifier struct {
	opts    WebhookOptions
	log     *slog.Logger
	queue   chan Event
	closing atomic.Bool
	stop    chan struct{} // closed by Close: drain the queue and return
	done    chan struct{} // closed by the worker when it returns
	// ctx ends the deliveries in flight when Close's drain deadline passes.
	ctx       context.Context
	cancel    context.CancelFunc
	closeOnce sync.Once
}

// NewWebhookNotifier starts a notifier's worker; Close stops it.
func NewWebhookNotifier(opts WebhookOptions) (*WebhookNotifier, error) {
	if opts.URL == "" {
		return nil, errors.New("approval: webhook: no URL")
	}
	if len(opts.Secret) == 0 {
		return nil, errors.New("approval: webhook: no secret")
	}
	if opts.Redactor == nil {
		return nil, errors.New("approval: webhook: no redactor")
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "toolgate"
	}
	if opts.Timeout == 0 {
		opts.Timeout = defaultWebhookTimeout
	}
	switch {
	case opts.Retries == 0:
		opts.Retries = defaultWebhookRetries
	case opts.Retries < 0:
		opts.Retries = 0
	}
	if opts.Backoff == nil {
		opts.Backoff = exponentialBackoff
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = defaultWebhookQueue
	}
	if opts.DrainTimeout <= 0 {
		opts.DrainTimeout = defaultWebhookDrain
	}
	if opts.Client == nil {
		opts.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &WebhookNotifier{
		opts: opts, log: log,
		queue: make(chan Event, opts.QueueSize),
		stop:  make(chan struct{}), done: make(chan struct{}),
		ctx: ctx, cancel: cancel,
	}
	go n.work()
	return n, nil
}

// exponentialBackoff waits 1s before the first retry, doubling to at most
// maxWebhookBackoff.
func exponentialBackoff(retry int) time.Duration {
	if retry >= 6 {
		return maxWebhookBackoff
	}
	return min(time.Second<<retry, maxWebhookBackoff)
}

// Notify queues ev for delivery and returns at once. When the queue is
// full, or the notifier is closed, ev is dropped and the drop logged: a
// slow receiver must never hold up a call.
func (n *WebhookNotifier) Notify(ev Event) {
	if n.closing.Load() {
		n.dropped(ev, "the notifier is closed")
		return
	}
	select {
	case n.queue <- ev:
	default:
		n.dropped(ev, fmt.Sprintf("the queue of %d is full", cap(n.queue)))
	}
}

func (n *WebhookNotifier) dropped(ev Event, why string) {
	n.log.Warn("approval webhook: notification dropped: "+why,
		"approval_id", ev.Approval.GetApprovalId(), "type", ev.Type)
}

// Close stops taking events, delivers those already queued for at most
// DrainTimeout, then ends the delivery in flight and drops the rest. It
// always returns nil; what was dropped is logged.
func (n *WebhookNotifier) Close() error {
	n.closeOnce.Do(func() {
		n.closing.Store(true)
		close(n.stop)
		timer := time.NewTimer(n.opts.DrainTimeout)
		defer timer.Stop()
		select {
		case <-n.done:
		case <-timer.C:
			n.cancel()
			<-n.done
		}
		n.cancel()
	})
	return nil
}

// work delivers queued events one at a time until Close, then drains.
func (n *WebhookNotifier) work() {
	defer close(n.done)
	for {
		select {
		case ev := <-n.queue:
			n.handle(ev)
		case <-n.stop:
			for {
				select {
				case ev := <-n.queue:
					n.handle(ev)
				default:
					return
				}
			}
		}
	}
}

// handle delivers ev, or drops it once Close has given up draining: the
// worker's select may take a queued event before it sees the stop, so the
// check belongs here rather than in the drain loop alone.
func (n *WebhookNotifier) handle(ev Event) {
	if n.ctx.Err() != nil {
		n.dropped(ev, "the gateway is stopping")
		return
	}
	n.deliver(ev)
}

// deliver sends one event, retrying transport errors, 5xx and 429.
func (n *WebhookNotifier) deliver(ev Event) {
	id := ev.Approval.GetApprovalId()
	body, err := n.body(ev)
	if err != nil {
		n.log.Error("approval webhook: notification dropped", "approval_id", id, "type", ev.Type, "err", err)
		return
	}
	delivery := id + "/" + ev.Type
	for attempt := 0; ; attempt++ {
		retryAfter, err := n.post(body, delivery)
		if err == nil {
			return
		}
		var final *finalError
		if errors.As(err, &final) || attempt >= n.opts.Retries || n.ctx.Err() != nil {
			n.log.Warn("approval webhook: delivery failed; not retried", "approval_id", id, "type", ev.Type,
				"attempts", attempt+1, "err", err)
			return
		}
		wait := n.opts.Backoff(attempt)
		if retryAfter > wait {
			wait = min(retryAfter, maxWebhookBackoff)
		}
		n.log.Info("approval webhook: delivery failed; retrying", "approval_id", id, "type", ev.Type,
			"attempt", attempt+1, "wait", wait, "err", err)
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-n.ctx.Done():
			timer.Stop()
		}
	}
}

// finalError is a delivery that retrying the same body cannot help: the
// receiver refused it (a 4xx other than 429, a redirect), or the request
// could not be made.
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
func (e *finalError) Unwrap() error { return e.err }

// body is the JSON an event is sent as: the approval's fields as
// ListApprovals shows them, with the event type, the gateway and the time,
// all redacted once more since the body leaves the gateway.
func (n *WebhookNotifier) body(ev Event) ([]byte, error) {
	if ev.Approval == nil {
		return nil, errors.New("approval: webhook: event without an approval")
	}
	fields := map[string]json.RawMessage{}
	approval, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(ev.Approval)
	if err != nil {
		return nil, fmt.Errorf("approval: webhook: %w", err)
	}
	if err := json.Unmarshal(approval, &fields); err != nil {
		return nil, fmt.Errorf("approval: webhook: %w", err)
	}
	for k, v := range map[string]string{
		"type": ev.Type, "gateway": n.opts.Gateway, "sent_at": time.Now().UTC().Format(time.RFC3339Nano),
	} {
		if fields[k], err = json.Marshal(v); err != nil {
			return nil, fmt.Errorf("approval: webhook: %w", err)
		}
	}
	raw, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("approval: webhook: %w", err)
	}
	redacted, _, err := n.opts.Redactor.JSON("approval_webhook.json", raw)
	if err != nil {
		return nil, fmt.Errorf("approval: webhook: %w", err)
	}
	return redacted, nil
}

// signWebhook returns the X-Toolgate-Signature value of body sent at ts.
func signWebhook(secret []byte, ts string, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// post makes one delivery attempt. It returns nil on a 2xx, a *finalError
// when a retry cannot help, and otherwise an error and the wait the
// receiver asked for in Retry-After (0 if none).
func (n *WebhookNotifier) post(body []byte, delivery string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(n.ctx, n.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.opts.URL, bytes.NewReader(body))
	if err != nil {
		return 0, &finalError{fmt.Errorf("approval: webhook: %w", err)}
	}
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", n.opts.UserAgent)
	req.Header.Set(HeaderWebhookTimestamp, ts)
	req.Header.Set(HeaderWebhookSignature, signWebhook(n.opts.Secret, ts, body))
	req.Header.Set(HeaderWebhookDelivery, delivery)
	resp, err := n.opts.Client.Do(req)
	if err != nil {
		// The URL may itself be a credential (chat webhooks put a token in
		// the path): report what went wrong, not where.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return 0, fmt.Errorf("approval: webhook: %w", err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxWebhookResponseBytes))
	resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return 0, nil
	case code == http.StatusTooManyRequests || code >= 500:
		return retryAfter(resp.Header.Get("Retry-After")), fmt.Errorf("approval: webhook: receiver answered %d %s", code, http.StatusText(code))
	default:
		return 0, &finalError{fmt.Errorf("approval: webhook: receiver answered %d %s", code, http.StatusText(code))}
	}
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(min(s, int(maxWebhookBackoff/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}
